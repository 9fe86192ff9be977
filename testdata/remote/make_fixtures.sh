#!/bin/sh
# Rebuilds the fatbin parser fixtures from kernel.cu with the CUDA toolkit (13.0 was used).
set -eu
cd "$(dirname "$0")"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
$NVCC -cubin -arch=sm_90 -o kernel_sm90.cubin kernel.cu
$NVCC -fatbin -arch=sm_90 -o kernel_sm90.fatbin kernel.cu
$NVCC -fatbin -arch=sm_90 --compress-mode=size -o kernel_sm90_zstd.fatbin kernel.cu
$NVCC -fatbin -arch=sm_90 --compress-mode=speed -o kernel_sm90_lz4.fatbin kernel.cu
$NVCC -fatbin -gencode arch=compute_90,code=compute_90 -o kernel_ptx.fatbin kernel.cu
$NVCC -fatbin -gencode arch=compute_90,code=compute_90 --compress-mode=none -o kernel_ptx_plain.fatbin kernel.cu
$NVCC -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  --compress-mode=size -o kernel_sm80_sm90.fatbin kernel.cu
$NVCC -fatbin -gencode arch=compute_90,code=compute_90 --compress-mode=speed -o kernel_ptx_lz4.fatbin kernel.cu
$NVCC -fatbin -arch=sm_90 -o globals_sm90.fatbin globals.cu
