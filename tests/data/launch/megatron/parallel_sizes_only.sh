#!/bin/bash
# Written for primus's tests in the structure of NVIDIA/Megatron-LM
# examples/post_training/modelopt/conf/moonshotai/*.sh (d98e8a6): a conf file that holds a checkpoint path,
# parallel sizes and pipeline options only; conf/arguments.sh sources the model's own file by the name
# given at run time. Not a copy of those files.

HF_MODEL_CKPT=/checkpoints/acme/Acme-8B-Instruct

MLM_EXTRA_ARGS=" \
    --decoder-first-pipeline-num-layers 2 \
    --use-cpu-initialization \
"

TP=4
EP=16
PP=8
