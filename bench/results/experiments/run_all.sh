#!/bin/bash
# the experiments of bench/results/experiments.md (run from the repo root)
set -e
export LETCC_CACHE_DIR=/tmp/letcc-exp
L=/work/venv/bin/letcc
O=bench/results/experiments
T="/usr/bin/time -f %e-s-wall"
for m in lenet5 repvgg vit; do
  $T $L sweep --model $m --K 8 --N 24 --stragglers 0:12:2 --rounds 32 --draws 20 --threads 1 --out $O --no-progress > $O/sweep-$m.txt 2>&1
done
$T $L sweep --model lenet5 --K 8 --N 24 --stragglers 0:12:2 --rounds 32 --draws 20 --lam auto --threads 1 --out $O/lam-auto --no-progress > $O/lam-auto/sweep-lenet5.txt 2>&1
$T $L table --threads 1 --out $O --no-progress > $O/table.txt 2>&1
$T $L sweep --model repvgg --data foolbox-cifar10 --K 4 --N 12 --stragglers 0:6 --rounds 5 --draws 20 --threads 1 --out $O --no-progress > $O/sweep-repvgg-foolbox-cifar10.txt 2>&1
$T $L sweep --model vit_b_16 --K 4 --N 8 --stragglers 0:3 --rounds 5 --draws 20 --lam auto --threads 2 --out $O --no-progress > $O/sweep-vit_b_16.txt 2>&1
$T $L coded-points --K 8 --N 24 --out $O > $O/coded-points.txt 2>&1
$T $L coded-points --data foolbox-cifar10 --K 8 --N 24 --out $O >> $O/coded-points.txt 2>&1
$T $L demo --out $O --no-progress > $O/demo.txt 2>&1
echo done
