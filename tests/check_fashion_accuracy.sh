#!/bin/sh
# ctest script: trains the 256-128-100 ReLU MLP (Adam, batch 128) on Fashion-MNIST for 15 epochs with
# gpulab-cli (on the GPU when one is usable) and fails unless the final test accuracy reaches MIN.
# Plain sh, not `cmake -P`, so it runs on a machine that has the build but not CMake where it was.
# Options after MIN are passed on to `gpulab-cli train` and override the ones here, the last one given
# winning (--amp bf16 --device cpu; --model cnn --hidden 128 --epochs 3).
#   check_fashion_accuracy.sh CLI MIN [OPTION...]
cli=$1 min=$2
shift 2
out=$("$cli" train --dataset fashion-mnist --model mlp --hidden 256,128,100 --optimizer adam --lr 0.001 \
        --batch-size 128 --epochs 15 --device auto --seed 0 --json "$@") || { echo "gpulab-cli failed ($?)"; exit 1; }
printf '%s\n' "$out" | grep '"event":"epoch"'
# The epochs run: the last --epochs given (an option after MIN overrides the 15 above).
epochs=15 prev=
for a in "$@"; do [ "$prev" = --epochs ] && epochs=$a; prev=$a; done
acc=$(printf '%s\n' "$out" | grep '"event":"done"' | sed -n 's/.*"test_accuracy":\([0-9.eE+-]*\).*/\1/p')
device=$(printf '%s\n' "$out" | grep '"event":"done"' | sed -n 's/.*"device":"\([^"]*\)".*/\1/p')
echo "Fashion-MNIST test accuracy after $epochs epochs on $device${*:+ ($*)}: ${acc:-none} (required: $min)"
[ -n "$acc" ] && awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a >= m) }' || { echo "accuracy ${acc:-none} is below $min"; exit 1; }
