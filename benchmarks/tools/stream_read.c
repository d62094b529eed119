/* Memory read bandwidth of this machine with 1 and 2 threads (one 64 MB buffer per thread,
 * AVX2 loads summed into 4 accumulators; best of 7 passes).  It tells how much of the
 * bandwidth one core gets alone, which bounds the memory-bound Dense layer of a Nature-DQN
 * population (benchmarks/results/pipeline.md, session 8).
 *
 *   gcc -O2 -mavx2 -pthread benchmarks/tools/stream_read.c -o /tmp/stream_read && /tmp/stream_read
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N (64L * 1024 * 1024 / 4)
static float *bufs[2];
volatile float sink[2]; /* read by nobody: volatile keeps the loop */

static void *read_all(void *arg) {
  long id = (long)arg;
  const float *a = bufs[id];
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (long i = 0; i < N; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(a + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(a + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(a + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(a + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  sink[id] = t[0];
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  for (int i = 0; i < 2; i++) {
    bufs[i] = aligned_alloc(64, N * sizeof(float));
    for (long j = 0; j < N; j++) bufs[i][j] = 1.0f;
  }
  for (long nt = 1; nt <= 2; nt++) {
    double best = 1e9;
    for (int r = 0; r < 7; r++) {
      pthread_t th[2];
      double t0 = now();
      for (long i = 0; i < nt; i++) pthread_create(&th[i], 0, read_all, (void *)i);
      for (long i = 0; i < nt; i++) pthread_join(th[i], 0);
      double dt = now() - t0;
      if (dt < best) best = dt;
    }
    printf("%ld thread(s): %.1f GB/s\n", nt, nt * N * sizeof(float) / best / 1e9);
  }
  return 0;
}
