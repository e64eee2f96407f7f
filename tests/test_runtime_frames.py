"""letcc.runtime.frames: messages in multiprocessing.Connection's wire format
over a raw descriptor. Checked against Connection itself in both directions,
and on every way a pipe hands bytes over: several messages in one read, one
message over several reads, messages larger than a read, EOF mid-message."""
import multiprocessing as mp
import os
import pickle
import struct
import threading

import pytest

from letcc.runtime.frames import FrameReader, frame, write_all


@pytest.fixture
def pipe():
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_round_trip_of_many_messages_written_at_once(rng, pipe):
    r, w = pipe
    msgs = [rng.bytes(int(n)) for n in rng.integers(0, 300, 50)] + [b""]
    write_all(w, b"".join(frame(m) for m in msgs))
    reader = FrameReader(r)
    got = reader.read_ready()
    while len(got) < len(msgs):
        got += reader.read_ready()
    assert got == msgs
    assert not reader.pending()
    assert not reader.poll(0)


def test_a_message_arriving_in_pieces(rng, pipe):
    r, w = pipe
    msg = rng.bytes(1000)
    data = frame(msg)
    reader = FrameReader(r)
    os.write(w, data[:3])
    assert reader.read_ready() == []        # half a header
    assert not reader.pending()
    os.write(w, data[3:600])
    assert reader.read_ready() == []        # header and part of the body
    os.write(w, data[600:] + frame(b"next")[:2])
    assert reader.read_ready() == [msg]
    os.write(w, frame(b"next")[2:])
    assert reader.recv() == b"next"


def test_messages_larger_than_one_read_and_than_the_pipe(rng, pipe):
    r, w = pipe
    big = rng.bytes(300_000)                # > the 64 KiB read and the pipe's buffer
    writer = threading.Thread(target=write_all, args=(w, frame(big) + frame(b"tail")))
    writer.start()
    reader = FrameReader(r)
    assert reader.recv() == big
    assert reader.recv() == b"tail"
    writer.join()


def test_interoperates_with_connection_both_ways(rng):
    a, b = mp.Pipe()                        # duplex: a socket pair
    try:
        reader = FrameReader(b.fileno())
        payloads = [rng.bytes(int(n)) for n in (0, 1, 17, 70_000)]
        sender = threading.Thread(target=lambda: [a.send_bytes(p) for p in payloads] + [a.send(("ready", 7))])
        sender.start()
        assert [reader.recv() for _ in payloads] == payloads
        assert pickle.loads(reader.recv()) == ("ready", 7)     # Connection.send's pickles load
        sender.join()
        write_all(b.fileno(), frame(pickle.dumps(("done", 3))) + frame(b"x" * 5000))
        assert a.recv() == ("done", 3)
        assert a.recv_bytes() == b"x" * 5000
    finally:
        a.close()
        b.close()


def test_the_long_length_header(pipe):
    # Connection writes -1 and an 8-byte length for messages of 2 GiB or more;
    # the reader follows that header whatever the length
    r, w = pipe
    os.write(w, struct.pack("!i", -1) + struct.pack("!Q", 5) + b"hello" + frame(b"after"))
    reader = FrameReader(r)
    assert reader.recv() == b"hello"
    assert reader.recv() == b"after"


def test_eof_before_and_inside_a_message(pipe):
    r, w = pipe
    os.write(w, frame(b"whole") + frame(b"cut short")[:7])
    os.close(w)
    reader = FrameReader(r)
    assert reader.recv() == b"whole"
    with pytest.raises(EOFError, match="closed"):
        reader.recv()
    assert reader.poll(0)                   # EOF is readable: the caller finds out by reading


def test_a_corrupt_header_is_an_error_not_a_hang(pipe):
    r, w = pipe
    os.write(w, struct.pack("!i", -7) + b"junk")
    reader = FrameReader(r)
    with pytest.raises(OSError, match="corrupt message header: length -7"):
        reader.recv()
    assert reader.pending()                 # still there: every later recv says the same
    with pytest.raises(OSError, match="corrupt message header"):
        reader.recv()


def test_poll_sees_buffered_messages_and_waits_for_new_ones(pipe):
    r, w = pipe
    reader = FrameReader(r)
    assert not reader.poll(0)
    assert not reader.poll(0.01)
    write_all(w, frame(b"one") + frame(b"two"))
    assert reader.poll(None)
    assert reader.read_ready() == [b"one", b"two"]
    write_all(w, frame(b"three") + frame(b"four"))
    assert reader.recv() == b"three"
    # "four" is already in the buffer: poll must not wait on the (empty) pipe
    assert reader.pending() and reader.poll(0)
    assert reader.recv() == b"four"


def test_recv_of_single_messages_and_of_several_in_one_read(rng, pipe):
    # one read = one whole message is the fast path; anything else is buffered
    r, w = pipe
    reader = FrameReader(r)
    for n in (0, 1, 37, 5000):
        msg = rng.bytes(n)
        os.write(w, frame(msg))
        assert reader.recv() == msg
    msgs = [rng.bytes(int(n)) for n in rng.integers(1, 50, 5)]
    os.write(w, b"".join(frame(m) for m in msgs))           # five in one read
    assert [reader.recv() for _ in msgs] == msgs
    data = frame(b"split")
    os.write(w, data[:6])
    threading.Timer(0.05, os.write, (w, data[6:])).start()   # the rest a little later
    assert reader.recv() == b"split"
    os.write(w, struct.pack("!i", -7) + b"xxxxxxx")           # a corrupt header
    with pytest.raises(OSError, match="corrupt message header: length -7"):
        reader.recv()


# ---- letcc.runtime.messages: the binary done / cancelled replies ----------------------

def test_binary_replies_round_trip_and_read_as_connection_frames(pipe):
    from letcc.runtime.messages import CANCELLED, DONE, parse_reply, reply_frame

    r, w = pipe
    reader = FrameReader(r)
    for kind, code in (("done", DONE), ("cancelled", CANCELLED)):
        for round_id in (0, 123456789, 2**40):
            write_all(w, reply_frame(kind, round_id))
            data = reader.recv()
            assert data[0] == code and parse_reply(data) == (kind, round_id)
    # what tells them from the pickled messages: a pickle starts with PROTO (0x80)
    assert pickle.dumps(("layout", 1), pickle.HIGHEST_PROTOCOL)[0] == 0x80 not in (DONE, CANCELLED)
    # the framing is Connection's: it reads them too
    a, b = mp.Pipe(duplex=False)
    try:
        write_all(b.fileno(), reply_frame("done", 5))
        assert parse_reply(a.recv_bytes()) == ("done", 5)
    finally:
        a.close()
        b.close()
