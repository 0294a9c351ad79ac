// Planted-bottleneck kernels (CUDA C++) for nsight-agent's diagnosis tests.
//
// Each kernel carries exactly one planted defect (or none, for the controls).
// Build:  nvcc -O3 -lineinfo -arch=sm_90 -o planted planted.cu            (every id)
//         nvcc ... -DPLANTED_ONLY -DWANT_<id> -o planted_<id> planted.cu  (one id: a small
//         module, which keeps each ncu report small; record-planted builds it this way)
// Run:    ./planted <id>      (ids: see bench/planted/catalog.json, language "cuda")
// fp16 conversions use inline PTX rather than cuda_fp16.h, so that ncu's source import
// (--import-source yes) carries only this file.
// The driver allocates what the chosen kernel needs, fills the inputs with a
// helper kernel (planted_fill / planted_make_next, which the ncu filter skips),
// then launches the planted kernel three times; record-planted profiles the third.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#define CK(x)                                                                 \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static const int kSMs = 132;  // H200 (and H100 SXM)

#ifdef PLANTED_ONLY
#define PLANTED_ALL 0
#else
#define PLANTED_ALL 1
#endif

typedef unsigned short half_bits;  // IEEE fp16, converted with cvt in PTX
__device__ __forceinline__ float h2f(half_bits h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ half_bits f2h(float f) {
  half_bits h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

// ---------------------------------------------------------------- helpers
extern "C" __global__ void planted_fill(float* p, size_t n, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = scale * (float)((unsigned)(i * 2654435761u) & 1023u) * (1.0f / 1024.0f);
}

extern "C" __global__ void planted_fill_half(half_bits* p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = f2h((float)((unsigned)(i * 2654435761u) & 255u) * (1.0f / 256.0f) - 0.5f);
}

// next[i] = (i + stride) mod n: thread t's chain visits t, t+T, t+2T, ...
// (each step of a warp is one coalesced 128-byte load, each dependent on the last).
extern "C" __global__ void planted_make_next(unsigned* next, size_t n, unsigned stride) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    next[i] = (unsigned)((i + stride) % n);
}

#if PLANTED_ALL || defined(WANT_uncoalesced_cuda)
// ------------------------------------------------ uncoalesced_global_access
// out[i] = in[(i % rows) * 32 + i / rows]: neighbouring threads read elements
// 32 floats (128 bytes) apart, so every warp load touches 32 sectors.
extern "C" __global__ void planted_strided_gather(const float* __restrict__ in,
                                                  float* __restrict__ out,
                                                  unsigned n, unsigned rows_shift) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned rows = 1u << rows_shift;
    out[i] = in[(i & (rows - 1u)) * 32u + (i >> rows_shift)];
  }
}
#endif

#if PLANTED_ALL || defined(WANT_bank_conflicts_cuda)
// ---------------------------------------------------- shared_bank_conflicts
// Tiled transpose through a 32x32 shared tile WITHOUT the +1 padding: the
// column read tile[threadIdx.x][...] puts all 32 lanes on one bank.
extern "C" __global__ void planted_transpose_nopad(const float* __restrict__ in,
                                                   float* __restrict__ out, int n) {
  __shared__ float tile[32][32];
  int x = blockIdx.x * 32 + threadIdx.x;
  int y = blockIdx.y * 32 + threadIdx.y;
#pragma unroll
  for (int j = 0; j < 32; j += 8) tile[threadIdx.y + j][threadIdx.x] = in[(size_t)(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * 32 + threadIdx.x;
  y = blockIdx.x * 32 + threadIdx.y;
#pragma unroll
  for (int j = 0; j < 32; j += 8) out[(size_t)(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
#endif

#if PLANTED_ALL || defined(WANT_too_few_blocks_cuda)
// ------------------------------------------------------------ too_few_blocks
// A clean float4 axpy, but launched on 4 blocks: 128 of 132 SMs stay idle.
extern "C" __global__ void planted_few_blocks(const float4* __restrict__ x,
                                              float4* __restrict__ y, size_t n4, float a) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 xv = x[i], yv = y[i];
    yv.x = fmaf(a, xv.x, yv.x);
    yv.y = fmaf(a, xv.y, yv.y);
    yv.z = fmaf(a, xv.z, yv.z);
    yv.w = fmaf(a, xv.w, yv.w);
    y[i] = yv;
  }
}
#endif

#if PLANTED_ALL || defined(WANT_tail_effect_cuda)
// ---------------------------------------------------------------- tail_effect
// Compute-bound blocks of 1024 threads, exactly 2 resident per SM (264 per wave).
// The grid is 277 blocks = 1.05 waves: the last 13 blocks run alone.
extern "C" __global__ void __launch_bounds__(1024, 2)
planted_tail_waves(float* __restrict__ out, int iters) {
  float a = threadIdx.x * 1e-3f, b = a + 1.0f, c = a + 2.0f, d = a + 3.0f;
  for (int i = 0; i < iters; ++i) {
    a = fmaf(a, 0.9999f, 0.0001f);
    b = fmaf(b, 0.9998f, 0.0002f);
    c = fmaf(c, 0.9997f, 0.0003f);
    d = fmaf(d, 0.9996f, 0.0004f);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}
#endif

#if PLANTED_ALL || defined(WANT_occupancy_registers_cuda)
// -------------------------------------------------------- occupancy_registers
// A latency-bound pointer chase whose 176 live accumulators push the register
// count near 200/thread: one 256-thread block per SM (8 warps), too few
// dependent chains in flight to hide DRAM latency.
#define REG_ACCS 176
extern "C" __global__ void planted_reg_hog(const unsigned* __restrict__ next,
                                           float* __restrict__ out, int rounds) {
  float acc[REG_ACCS];
#pragma unroll
  for (int j = 0; j < REG_ACCS; ++j) acc[j] = 0.0f;
  unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int j = 0; j < REG_ACCS; ++j) {
      p = next[p];
      acc[j] = fmaf(acc[j], 0.5f, (float)(p & 1023u));
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < REG_ACCS; ++j) s = fmaf(s, 1.0001f, acc[j]);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
#endif

#if PLANTED_ALL || defined(WANT_occupancy_smem_cuda)
// --------------------------------------------------- occupancy_shared_memory
// The same dependent chase with few registers, but each block asks for 200 KB
// of dynamic shared memory (it uses a few bytes), so one block fits per SM.
extern "C" __global__ void planted_smem_hog(const unsigned* __restrict__ next,
                                            float* __restrict__ out, int steps) {
  extern __shared__ float stage[];
  unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int s = 0; s < steps; ++s) {
    p = next[p];
    acc = fmaf(acc, 0.5f, (float)(p & 1023u));
  }
  stage[threadIdx.x] = acc;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = stage[(threadIdx.x + 1) % blockDim.x];
}
#endif

#if PLANTED_ALL || defined(WANT_occupancy_blocksize_cuda)
// ------------------------------------------------------ occupancy_block_size
// The same chase, in blocks of 32 threads: the 32-blocks-per-SM limit caps the
// SM at 32 of 64 warps although registers and shared memory would allow 64.
extern "C" __global__ void planted_small_blocks(const unsigned* __restrict__ next,
                                                float* __restrict__ out, int steps) {
  unsigned p = blockIdx.x * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int s = 0; s < steps; ++s) {
    p = next[p];
    acc = fmaf(acc, 0.5f, (float)(p & 1023u));
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
#endif

#if PLANTED_ALL || defined(WANT_warp_divergence_cuda)
// ----------------------------------------------------------- warp_divergence
// Odd and even lanes take different heavy arithmetic paths: each warp runs
// both paths one after the other with half its lanes masked off.
extern "C" __global__ void planted_divergent(const float* __restrict__ in,
                                             float* __restrict__ out, int iters) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = in[i], y = x + 1.0f, z = x + 2.0f, w = x + 3.0f;
  if (threadIdx.x & 1u) {
    for (int k = 0; k < iters; ++k) {
      x = fmaf(x, 0.9999f, 0.0001f);
      y = fmaf(y, 0.9998f, 0.0002f);
      z = fmaf(z, 0.9997f, 0.0003f);
      w = fmaf(w, 0.9996f, 0.0004f);
    }
  } else {
    for (int k = 0; k < iters; ++k) {
      x = x * y + 0.25f;
      y = y - z * 0.5f;
      z = z * w + 0.125f;
      w = w - x * 0.75f;
    }
  }
  out[i] = x + y + z + w;
}
#endif

#if PLANTED_ALL || defined(WANT_local_spills_cuda)
// -------------------------------------------------------- local_memory_spills
// 48 values that all stay live through a loop, under __launch_bounds__(1024, 2),
// which caps the kernel at 32 registers: ptxas spills to local memory and
// every iteration reloads and re-stores the spilled values.
#define SPILL_VALS 48
extern "C" __global__ void __launch_bounds__(1024, 2)
planted_spills(const float* __restrict__ in, float* __restrict__ out, int iters) {
  unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned stride = gridDim.x * blockDim.x;
  float v[SPILL_VALS];
#pragma unroll
  for (int j = 0; j < SPILL_VALS; ++j) v[j] = in[t + j * stride];
  for (int k = 0; k < iters; ++k) {
#pragma unroll
    for (int j = 0; j < SPILL_VALS; ++j) v[j] = fmaf(v[j], v[(j + 7) % SPILL_VALS], 0.001f);
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < SPILL_VALS; ++j) s += v[j];
  out[t] = s;
}
#endif

#if PLANTED_ALL || defined(WANT_tensor_idle_cuda)
// ----------------------------------------------------------- tensor_cores_idle
// C = A * B with fp16 inputs, fp32 accumulate, computed with plain FP32 FMA
// (a clean 64x128x16 shared-memory tiling, 4x8 outputs per thread): the
// tensor cores, which would do this in mma/wgmma, stay idle.
#define GM 64
#define GN 128
#define GK 16
extern "C" __global__ void __launch_bounds__(256)
planted_simt_hgemm(const half_bits* __restrict__ A, const half_bits* __restrict__ B,
                   float* __restrict__ C, int M, int N, int K) {
  __shared__ float4 As4[GK][GM / 4 + 1];  // A tile, transposed: As[k][m] (+4 pad)
  __shared__ float4 Bs4[GK][GN / 4];      // B tile: Bs[k][n]
  float* As = reinterpret_cast<float*>(As4);
  float* Bs = reinterpret_cast<float*>(Bs4);
  const int lda_s = GM + 4;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int row0 = blockIdx.y * GM, col0 = blockIdx.x * GN;
  float acc[4][8];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += GK) {
#pragma unroll
    for (int l = 0; l < 4; ++l) {  // A tile: 64 rows x 16 k
      int idx = threadIdx.x + l * 256;
      int r = idx / GK, c = idx % GK;
      As[c * lda_s + r] = h2f(A[(size_t)(row0 + r) * K + k0 + c]);
    }
#pragma unroll
    for (int l = 0; l < 8; ++l) {  // B tile: 16 k x 128 cols
      int idx = threadIdx.x + l * 256;
      int r = idx / GN, c = idx % GN;
      Bs[r * GN + c] = h2f(B[(size_t)(k0 + r) * N + col0 + c]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < GK; ++kk) {
      float4 a0 = As4[kk][ty];
      float4 b0 = Bs4[kk][tx], b1 = Bs4[kk][16 + tx];
      float a[4] = {a0.x, a0.y, a0.z, a0.w};
      float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float* crow = C + (size_t)(row0 + ty * 4 + i) * N + col0;
    *reinterpret_cast<float4*>(crow + tx * 4) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    *reinterpret_cast<float4*>(crow + 64 + tx * 4) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
  }
}
#endif

#if PLANTED_ALL || defined(WANT_slow_precision_cuda)
// ------------------------------------------------------------- slow_precision
// fp32 data, but the arithmetic is done in fp64 (double FMA chains): the
// kernel runs on the FP64 pipe, at half (or on other GPUs 1/64) of the FP32 rate.
extern "C" __global__ void planted_fp64_math(const float* __restrict__ in,
                                             float* __restrict__ out, int iters) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  double a = in[i], b = a + 1.0, c = a + 2.0, d = a + 3.0;
  for (int k = 0; k < iters; ++k) {
    a = fma(a, 0.999999, 1e-6);
    b = fma(b, 0.999998, 2e-6);
    c = fma(c, 0.999997, 3e-6);
    d = fma(d, 0.999996, 4e-6);
  }
  out[i] = (float)(a + b + c + d);
}
#endif

#if PLANTED_ALL || defined(WANT_tiny_launch_cuda)
// ---------------------------------------------------------- launch_bound_tiny
// One block of 32 threads touching 32 floats: the launch costs more than the work.
extern "C" __global__ void planted_tiny(float* __restrict__ p, int n) {
  int i = threadIdx.x;
  if (i < n) p[i] = p[i] * 1.5f + 1.0f;
}
#endif

#if PLANTED_ALL || defined(WANT_atomic_cuda)
// ---------------------------------------------------------- atomic_contention
// Every thread adds its element to ONE global float: all atomics serialise
// on a single L2 address.
extern "C" __global__ void planted_atomic_one(const float* __restrict__ in,
                                              float* __restrict__ sum, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(sum, in[i]);
}
#endif

#if PLANTED_ALL || defined(WANT_control_copy_cuda)
// ------------------------------------------------------------ control: DRAM
// Vectorised float4 copy, one float4 per thread, 1 GiB in and 1 GiB out.
extern "C" __global__ void control_copy_f4(const float4* __restrict__ in,
                                           float4* __restrict__ out, size_t n4) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n4) out[i] = in[i];
}
#endif

#if PLANTED_ALL || defined(WANT_control_fma_cuda)
// --------------------------------------------------------- control: compute
// Eight independent FP32 FMA chains per thread at full occupancy.
extern "C" __global__ void __launch_bounds__(256)
control_fma_ilp(float* __restrict__ out, int iters) {
  unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float v0 = t * 1e-6f, v1 = v0 + 1.f, v2 = v0 + 2.f, v3 = v0 + 3.f;
  float v4 = v0 + 4.f, v5 = v0 + 5.f, v6 = v0 + 6.f, v7 = v0 + 7.f;
  for (int k = 0; k < iters; ++k) {
    v0 = fmaf(v0, 0.9999f, 0.0001f);
    v1 = fmaf(v1, 0.9999f, 0.0001f);
    v2 = fmaf(v2, 0.9999f, 0.0001f);
    v3 = fmaf(v3, 0.9999f, 0.0001f);
    v4 = fmaf(v4, 0.9999f, 0.0001f);
    v5 = fmaf(v5, 0.9999f, 0.0001f);
    v6 = fmaf(v6, 0.9999f, 0.0001f);
    v7 = fmaf(v7, 0.9999f, 0.0001f);
  }
  out[t] = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
}
#endif

#if PLANTED_ALL || defined(WANT_foreign_nvtx_domain)
// ------------------------------------------------ foreign NVTX (CUDA variant)
// A clean float4 scale, launched inside a range of another tool's NVTX domain.
extern "C" __global__ void nvtx_step_scale(float4* __restrict__ p, size_t n4, float s) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 v = p[i];
    v.x *= s; v.y *= s; v.z *= s; v.w *= s;
    p[i] = v;
  }
}
#endif
// =========================================================== held-out kernels
// Recorded once and never used to tune the diagnosis rules ("split": "held_out" in
// catalog.json). Each is written the way a user might write it, with one defect
// (or none, for the control), and differs in shape and code from the tuning kernels.

#if PLANTED_ALL || defined(WANT_row_sums_cuda)
// held out, uncoalesced_global_access: row sums of a row-major matrix with one
// thread per row. At each step the 32 lanes of a warp read 32 different rows,
// `cols` floats apart, so a warp load uses 4 bytes of each 32-byte sector.
extern "C" __global__ void ho_row_sums(const float* __restrict__ m, float* __restrict__ sums,
                                       int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.0f;
  for (int c = 0; c < cols; ++c) s += m[(size_t)r * cols + c];
  sums[r] = s;
}
#endif

#if PLANTED_ALL || defined(WANT_block_scan_cuda)
// held out, shared_bank_conflicts: inclusive scan of 8192-float chunks. The
// chunk is staged in shared memory (coalesced), then each thread scans its own
// 32 consecutive elements, seg[j] = buf[threadIdx.x * 32 + j]: for a given j all
// 32 lanes of a warp hit the same bank. Segment totals are combined with shuffles.
#define SCAN_SEG 32
#define SCAN_THREADS 256
extern "C" __global__ void __launch_bounds__(SCAN_THREADS)
ho_block_scan(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float buf[SCAN_THREADS * SCAN_SEG];
  __shared__ float warp_total[SCAN_THREADS / 32];
  const size_t base = (size_t)blockIdx.x * SCAN_THREADS * SCAN_SEG;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int j = 0; j < SCAN_SEG; ++j)
    buf[j * SCAN_THREADS + threadIdx.x] = in[base + j * SCAN_THREADS + threadIdx.x];
  __syncthreads();

  float* seg = buf + threadIdx.x * SCAN_SEG;
  float run = 0.0f;
  for (int j = 0; j < SCAN_SEG; ++j) {
    run += seg[j];
    seg[j] = run;
  }
  // inclusive scan of the segment totals within the warp, then across warps
  float t = run;
  for (int d = 1; d < 32; d <<= 1) {
    float y = __shfl_up_sync(0xffffffffu, t, d);
    t += (lane >= d) ? y : 0.0f;
  }
  if (lane == 31) warp_total[warp] = t;
  __syncthreads();
  float before = 0.0f;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  const float offset = before + t - run;  // sum of all earlier segments
  for (int j = 0; j < SCAN_SEG; ++j) seg[j] += offset;
  __syncthreads();
  for (int j = 0; j < SCAN_SEG; ++j)
    out[base + j * SCAN_THREADS + threadIdx.x] = buf[j * SCAN_THREADS + threadIdx.x];
}
#endif

#if PLANTED_ALL || defined(WANT_thread_hist_cuda)
// held out, local_memory_spills: a 16-bin histogram per thread, indexed by the
// data. An array indexed at run time cannot live in registers, so every count
// is a local-memory load and store. Each thread writes its counts (coalesced).
#define HIST_BINS 16
extern "C" __global__ void ho_thread_hist(const float4* __restrict__ x,
                                          unsigned* __restrict__ counts, size_t n4) {
  unsigned bins[HIST_BINS];
  for (int b = 0; b < HIST_BINS; ++b) bins[b] = 0u;
  const size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = t; i < n4; i += stride) {
    float4 v = x[i];
    bins[(unsigned)(v.x * HIST_BINS) & (HIST_BINS - 1)]++;
    bins[(unsigned)(v.y * HIST_BINS) & (HIST_BINS - 1)]++;
    bins[(unsigned)(v.z * HIST_BINS) & (HIST_BINS - 1)]++;
    bins[(unsigned)(v.w * HIST_BINS) & (HIST_BINS - 1)]++;
  }
  for (int b = 0; b < HIST_BINS; ++b) counts[b * stride + t] = bins[b];
}
#endif

#if PLANTED_ALL || defined(WANT_collatz_cuda)
// held out, warp_divergence: Collatz stopping time of consecutive integers.
// Each lane loops until its own value reaches 1, so a warp runs as long as its
// slowest lane while the lanes that are done sit masked off.
extern "C" __global__ void ho_collatz_steps(unsigned* __restrict__ steps,
                                            unsigned long long first, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned long long v = first + i;
  unsigned s = 0;
  while (v != 1ull) {
    v = (v & 1ull) ? 3ull * v + 1ull : v >> 1;
    ++s;
  }
  steps[i] = s;
}
#endif

#if PLANTED_ALL || defined(WANT_logistic_map_cuda)
// held out, slow_precision: iterates the logistic map x <- r x (1 - x). Data
// and r are float, but the literal 1.0 is a double, so (1 - x) and the product
// with it run in fp64 (with conversions) on every step.
extern "C" __global__ void ho_logistic_map(const float* __restrict__ x0, float* __restrict__ out,
                                           float r, int steps, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = x0[i];
  for (int s = 0; s < steps; ++s) x = r * x * (1.0 - x);
  out[i] = x;
}
#endif

#if PLANTED_ALL || defined(WANT_control_triad_cuda)
// held out, control (DRAM roof): STREAM triad a = b + s * c on float4.
extern "C" __global__ void ho_triad(float4* __restrict__ a, const float4* __restrict__ b,
                                    const float4* __restrict__ c, float s, size_t n4) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n4) {
    float4 bv = b[i], cv = c[i];
    a[i] = make_float4(bv.x + s * cv.x, bv.y + s * cv.y, bv.z + s * cv.z, bv.w + s * cv.w);
  }
}
#endif
// ======================================================================= host
#if PLANTED_ALL || defined(WANT_half_wave_cuda)
// ------------------------------------------------------------------ half_wave
// A scalar grid-stride axpy in blocks of 256 threads: 8 such blocks fit on an SM
// (1056 per wave on 132 SMs), but the grid is 4 x SMs = 528 blocks: more blocks
// than SMs, yet half a wave, so half of every SM's warp slots stay empty and the
// loads in flight are too few to cover DRAM latency.
extern "C" __global__ void __launch_bounds__(256)
planted_half_wave(const float* __restrict__ x, float* __restrict__ y, size_t n, float a) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = fmaf(a, x[i], y[i]);
}
#endif

// ============================================================ held out: the matmul set
// Written with its expected cause before it was recorded, after idle tensor cores were
// ranked above the operand feed's memory symptoms; recorded once, never used to tune a rule
// ("split": "held_out_matmul").
#if PLANTED_ALL || defined(WANT_naive_matmul_cuda)
// tensor_cores_idle: the textbook first GEMM, C = A B in fp32 with one thread per element of
// C (16 x 16 blocks) and a loop over k: every product is an FFMA on the CUDA cores, and the
// operands come from global memory (L1) at each step, no shared-memory tile.
extern "C" __global__ void hom_naive_matmul(const float* __restrict__ a,
                                           const float* __restrict__ b, float* __restrict__ c,
                                           int m, int n, int k) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.0f;
  for (int i = 0; i < k; ++i) acc += a[(size_t)row * k + i] * b[(size_t)i * n + col];
  c[(size_t)row * n + col] = acc;
}
#endif

template <class T>
static T* dalloc(size_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(T)));
  return p;
}
static float* dfill(size_t n, float scale = 1.0f) {
  float* p = dalloc<float>(n);
  planted_fill<<<1024, 256>>>(p, n, scale);
  CK(cudaGetLastError());
  return p;
}
static unsigned* dchase(size_t n, unsigned stride) {
  unsigned* p = dalloc<unsigned>(n);
  planted_make_next<<<1024, 256>>>(p, n, stride);
  CK(cudaGetLastError());
  return p;
}

static const int kLaunches = 3;  // record-planted uses --launch-skip 2 -c 1

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <id>\n", argv[0]);
    return 2;
  }
  const char* id = argv[1];
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float ms = 0.0f;
#define LAUNCH_N(stmt)                                  \
  for (int rep = 0; rep < kLaunches; ++rep) {           \
    CK(cudaEventRecord(e0));                            \
    stmt;                                               \
    CK(cudaEventRecord(e1));                            \
    CK(cudaGetLastError());                             \
  }                                                     \
  CK(cudaEventSynchronize(e1));                         \
  CK(cudaEventElapsedTime(&ms, e0, e1));

  if (false) {
#if PLANTED_ALL || defined(WANT_uncoalesced_cuda)
  } else if (!strcmp(id, "uncoalesced_cuda")) {
    const unsigned shift = 21, n = 32u << shift;  // 64 Mi floats
    float *in = dfill(n), *out = dalloc<float>(n);
    LAUNCH_N((planted_strided_gather<<<n / 256, 256>>>(in, out, n, shift)));
#endif
#if PLANTED_ALL || defined(WANT_bank_conflicts_cuda)
  } else if (!strcmp(id, "bank_conflicts_cuda")) {
    const int n = 8192;
    float *in = dfill((size_t)n * n), *out = dalloc<float>((size_t)n * n);
    LAUNCH_N((planted_transpose_nopad<<<dim3(n / 32, n / 32), dim3(32, 8)>>>(in, out, n)));
#endif
#if PLANTED_ALL || defined(WANT_too_few_blocks_cuda)
  } else if (!strcmp(id, "too_few_blocks_cuda")) {
    const size_t n = 32ull << 20;  // 32 Mi floats each for x and y
    float *x = dfill(n), *y = dfill(n);
    LAUNCH_N((planted_few_blocks<<<4, 1024>>>((const float4*)x, (float4*)y, n / 4, 0.5f)));
#endif
#if PLANTED_ALL || defined(WANT_half_wave_cuda)
  } else if (!strcmp(id, "half_wave_cuda")) {
    const size_t n = 64ull << 20;  // 64 Mi floats each for x and y
    float *x = dfill(n), *y = dfill(n);
    LAUNCH_N((planted_half_wave<<<4 * kSMs, 256>>>(x, y, n, 0.5f)));
#endif
#if PLANTED_ALL || defined(WANT_tail_effect_cuda)
  } else if (!strcmp(id, "tail_effect_cuda")) {
    const int blocks = 2 * kSMs + 13;  // 277 blocks, 264 per wave -> 1.05 waves
    float* out = dalloc<float>((size_t)blocks * 1024);
    LAUNCH_N((planted_tail_waves<<<blocks, 1024>>>(out, 4000)));
#endif
#if PLANTED_ALL || defined(WANT_occupancy_registers_cuda)
  } else if (!strcmp(id, "occupancy_registers_cuda")) {
    const unsigned blocks = 4 * kSMs, threads = blocks * 256;
    const int rounds = 2;
    const size_t n = (size_t)threads * rounds * REG_ACCS;
    unsigned* next = dchase(n, threads);
    float* out = dalloc<float>(threads);
    LAUNCH_N((planted_reg_hog<<<blocks, 256>>>(next, out, rounds)));
#endif
#if PLANTED_ALL || defined(WANT_occupancy_smem_cuda)
  } else if (!strcmp(id, "occupancy_smem_cuda")) {
    const unsigned blocks = 2 * kSMs, threads = blocks * 256;
    const int steps = 352, smem = 200 * 1024;
    const size_t n = (size_t)threads * steps;
    unsigned* next = dchase(n, threads);
    float* out = dalloc<float>(threads);
    CK(cudaFuncSetAttribute(planted_smem_hog, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    LAUNCH_N((planted_smem_hog<<<blocks, 256, smem>>>(next, out, steps)));
#endif
#if PLANTED_ALL || defined(WANT_occupancy_blocksize_cuda)
  } else if (!strcmp(id, "occupancy_blocksize_cuda")) {
    const unsigned blocks = 32 * kSMs * 2, threads = blocks * 32;  // 2 waves of 32 blocks/SM
    const int steps = 352;
    const size_t n = (size_t)threads * steps;
    unsigned* next = dchase(n, threads);
    float* out = dalloc<float>(threads);
    LAUNCH_N((planted_small_blocks<<<blocks, 32>>>(next, out, steps)));
#endif
#if PLANTED_ALL || defined(WANT_warp_divergence_cuda)
  } else if (!strcmp(id, "warp_divergence_cuda")) {
    const unsigned blocks = 8 * kSMs * 2, threads = blocks * 256;
    float *in = dfill(threads), *out = dalloc<float>(threads);
    LAUNCH_N((planted_divergent<<<blocks, 256>>>(in, out, 1000)));
#endif
#if PLANTED_ALL || defined(WANT_local_spills_cuda)
  } else if (!strcmp(id, "local_spills_cuda")) {
    const unsigned blocks = 2 * kSMs * 2, threads = blocks * 1024;
    float *in = dfill((size_t)threads * SPILL_VALS), *out = dalloc<float>(threads);
    LAUNCH_N((planted_spills<<<blocks, 1024>>>(in, out, 40)));
#endif
#if PLANTED_ALL || defined(WANT_tensor_idle_cuda)
  } else if (!strcmp(id, "tensor_idle_cuda")) {
    // M = 2112 = 33 * 64 gives 16 x 33 = 528 blocks = exactly 2 waves of 2 blocks/SM.
    const int m = 2112, n = 2048, k = 2048;
    half_bits *a = dalloc<half_bits>((size_t)m * k), *b = dalloc<half_bits>((size_t)k * n);
    planted_fill_half<<<1024, 256>>>(a, (size_t)m * k);
    planted_fill_half<<<1024, 256>>>(b, (size_t)k * n);
    float* c = dalloc<float>((size_t)m * n);
    LAUNCH_N((planted_simt_hgemm<<<dim3(n / GN, m / GM), 256>>>(a, b, c, m, n, k)));
#endif
#if PLANTED_ALL || defined(WANT_slow_precision_cuda)
  } else if (!strcmp(id, "slow_precision_cuda")) {
    const unsigned blocks = 8 * kSMs * 2, threads = blocks * 256;
    float *in = dfill(threads), *out = dalloc<float>(threads);
    LAUNCH_N((planted_fp64_math<<<blocks, 256>>>(in, out, 2000)));
#endif
#if PLANTED_ALL || defined(WANT_tiny_launch_cuda)
  } else if (!strcmp(id, "tiny_launch_cuda")) {
    float* p = dfill(32);
    LAUNCH_N((planted_tiny<<<1, 32>>>(p, 32)));
#endif
#if PLANTED_ALL || defined(WANT_atomic_cuda)
  } else if (!strcmp(id, "atomic_cuda")) {
    const unsigned n = 8u << 20;
    float *in = dfill(n), *sum = dalloc<float>(1);
    CK(cudaMemset(sum, 0, sizeof(float)));
    LAUNCH_N((planted_atomic_one<<<n / 256, 256>>>(in, sum, n)));
#endif
#if PLANTED_ALL || defined(WANT_control_copy_cuda)
  } else if (!strcmp(id, "control_copy_cuda")) {
    const size_t n = 256ull << 20;  // 256 Mi floats = 1 GiB
    float *in = dfill(n), *out = dalloc<float>(n);
    LAUNCH_N((control_copy_f4<<<(unsigned)(n / 4 / 256), 256>>>((const float4*)in, (float4*)out, n / 4)));
#endif
#if PLANTED_ALL || defined(WANT_control_fma_cuda)
  } else if (!strcmp(id, "control_fma_cuda")) {
    const unsigned blocks = 8 * kSMs * 2, threads = blocks * 256;
    float* out = dalloc<float>(threads);
    LAUNCH_N((control_fma_ilp<<<blocks, 256>>>(out, 2000)));
#endif
#if PLANTED_ALL || defined(WANT_foreign_nvtx_domain)
  } else if (!strcmp(id, "foreign_nvtx_domain")) {
    const size_t n = 64ull << 20;
    float* p = dfill(n);
    nvtxDomainHandle_t dom = nvtxDomainCreateA("other_tool");
    nvtxEventAttributes_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = "step";
    LAUNCH_N((nvtxDomainRangePushEx(dom, &attr),
              nvtx_step_scale<<<(unsigned)(n / 4 / 256), 256>>>((float4*)p, n / 4, 0.999f),
              nvtxDomainRangePop(dom)));
#endif
#if PLANTED_ALL || defined(WANT_row_sums_cuda)
  } else if (!strcmp(id, "row_sums_cuda")) {
    const int rows = 1 << 20, cols = 96;  // 384 MiB
    float *m = dfill((size_t)rows * cols), *sums = dalloc<float>(rows);
    LAUNCH_N((ho_row_sums<<<rows / 256, 256>>>(m, sums, rows, cols)));
#endif
#if PLANTED_ALL || defined(WANT_block_scan_cuda)
  } else if (!strcmp(id, "block_scan_cuda")) {
    const size_t n = 64ull << 20;  // 64 Mi floats, 8192 per block
    float *in = dfill(n), *out = dalloc<float>(n);
    LAUNCH_N((ho_block_scan<<<(unsigned)(n / (SCAN_THREADS * SCAN_SEG)), SCAN_THREADS>>>(in, out)));
#endif
#if PLANTED_ALL || defined(WANT_thread_hist_cuda)
  } else if (!strcmp(id, "thread_hist_cuda")) {
    const size_t n = 64ull << 20;  // 64 Mi floats in [0, 1)
    const unsigned blocks = 8 * kSMs, threads = 256;
    float* x = dfill(n);
    unsigned* counts = dalloc<unsigned>((size_t)HIST_BINS * blocks * threads);
    LAUNCH_N((ho_thread_hist<<<blocks, threads>>>((const float4*)x, counts, n / 4)));
#endif
#if PLANTED_ALL || defined(WANT_collatz_cuda)
  } else if (!strcmp(id, "collatz_cuda")) {
    const unsigned n = 4u << 20;
    unsigned* steps = dalloc<unsigned>(n);
    LAUNCH_N((ho_collatz_steps<<<n / 256, 256>>>(steps, 1000000000ull, n)));
#endif
#if PLANTED_ALL || defined(WANT_logistic_map_cuda)
  } else if (!strcmp(id, "logistic_map_cuda")) {
    const int n = 1 << 20;
    float *x0 = dfill(n), *out = dalloc<float>(n);
    LAUNCH_N((ho_logistic_map<<<n / 256, 256>>>(x0, out, 3.9f, 1000, n)));
#endif
#if PLANTED_ALL || defined(WANT_control_triad_cuda)
  } else if (!strcmp(id, "control_triad_cuda")) {
    const size_t n = 128ull << 20;  // 128 Mi floats (512 MiB) per array
    float *a = dalloc<float>(n), *b = dfill(n), *c = dfill(n);
    LAUNCH_N((ho_triad<<<(unsigned)(n / 4 / 256), 256>>>((float4*)a, (const float4*)b,
                                                        (const float4*)c, 3.0f, n / 4)));
#endif
#if PLANTED_ALL || defined(WANT_naive_matmul_cuda)
  } else if (!strcmp(id, "naive_matmul_cuda")) {
    const int m = 3072, n = 3072, k = 1536;
    float *a = dfill((size_t)m * k), *b = dfill((size_t)k * n), *c = dalloc<float>((size_t)m * n);
    dim3 block(16, 16), grid(n / 16, m / 16);
    LAUNCH_N((hom_naive_matmul<<<grid, block>>>(a, b, c, m, n, k)));
#endif
  } else {
    fprintf(stderr, "unknown id %s\n", id);
    return 2;
  }
  CK(cudaDeviceSynchronize());
  printf("%s: last launch %.3f ms (cuda events)\n", id, ms);
  return 0;
}
