#!/bin/bash
# Written for primus's tests in the structure of NVIDIA/Megatron-LM examples/bert/train_bert_340m_distributed.sh.
GPUS_PER_NODE=8
DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes 1)
BERT_MODEL_ARGS=(--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 512)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_bert.py ${BERT_MODEL_ARGS[@]} --micro-batch-size 4 --fp16
