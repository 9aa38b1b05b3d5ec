#!/bin/bash
# Written for primus's tests in the structure of NVIDIA/Megatron-LM
# examples/post_training/modelopt/conf/nvidia/Nemotron-H-*.sh (d98e8a6): a Mamba hybrid's arguments.
MODEL_ARGS=" \
    --bf16 \
    --hidden-size 3072 \
    --num-attention-heads 32 \
    --hybrid-layer-pattern M-M-M*-M-M- \
    --mamba-num-heads 112 \
    --seq-length 4096 \
"
