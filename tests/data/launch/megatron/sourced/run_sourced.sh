#!/bin/bash
# Written for primus's tests in the structure of Megatron-LM examples/academic_paper_scripts/sc21/run_*.sh:
# the model and the node count come from a sourced file; a second source names a path only a run knows.
. `pwd`/CONFIG.sh
source "$SANDBOX_SETUP/env.sh"
torchrun --nnodes $NNODES --nproc-per-node 8 pretrain_gpt.py $MODEL_ARGS \
    --tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16
