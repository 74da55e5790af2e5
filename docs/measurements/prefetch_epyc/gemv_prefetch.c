/* Software prefetch in a register-blocked matrix-vector product (issue 13 item 8; see
   ../prefetch_epyc.md). y = W x, W row-major: LLaMA-7B's up (11008 x 4096) and down
   (4096 x 11008) projections, one pass over each per timing. Variants: "read" streams the
   same bytes with no product (the one-stream bound), gR jams R rows (R vector accumulators,
   as pimbuild.codegen.register_block does), g1u8 one row with 8 accumulators (one stream),
   gRpD adds a prefetch of each row D floats ahead once per cache line (T0; t1: T1). Each
   of 15 rounds runs every variant once, in turn; median and quartiles per variant.
   gcc -O3 -march=native -o gemv_prefetch gemv_prefetch.c && ./gemv_prefetch */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
typedef void (*gemv_t)(const float*,const float*,float*,int,int,int);
#define PF(p,h) _mm_prefetch((const char*)(p),h)
/* y[i] = sum_k W[i][k] x[k]; R rows jammed; PD = prefetch distance in floats (0 = none) */
#define GEMV(NAME,R,PD,HINT) \
static void NAME(const float*W,const float*x,float*y,int N,int K,int dummy){ \
 for(int i=0;i<N;i+=R){ __m256 a[R]; for(int r=0;r<R;r++)a[r]=_mm256_setzero_ps(); \
  for(int k=0;k<K;k+=8){ __m256 xv=_mm256_loadu_ps(x+k); \
   for(int r=0;r<R;r++){ const float*w=W+(size_t)(i+r)*K+k; if(PD&&((k&15)==0)) PF(w+PD,HINT); \
     a[r]=_mm256_fmadd_ps(_mm256_loadu_ps(w),xv,a[r]);} } \
  for(int r=0;r<R;r++){ __m128 s=_mm_add_ps(_mm256_castps256_ps128(a[r]),_mm256_extractf128_ps(a[r],1)); \
   s=_mm_hadd_ps(s,s); s=_mm_hadd_ps(s,s); y[i+r]=_mm_cvtss_f32(s);} } }
GEMV(g4,4,0,_MM_HINT_T0) GEMV(g8,8,0,_MM_HINT_T0)
GEMV(g4p256,4,256,_MM_HINT_T0) GEMV(g8p256,8,256,_MM_HINT_T0)
GEMV(g4p1k,4,1024,_MM_HINT_T0) GEMV(g8p1k,8,1024,_MM_HINT_T0)
GEMV(g8p1kt1,8,1024,_MM_HINT_T1) GEMV(g8p512,8,512,_MM_HINT_T0)
static void readbw(const float*W,const float*x,float*y,int N,int K,int d){ __m256 a[8]; for(int r=0;r<8;r++)a[r]=_mm256_setzero_ps();
 size_t n=(size_t)N*K; for(size_t k=0;k<n;k+=64) for(int r=0;r<8;r++) a[r]=_mm256_add_ps(a[r],_mm256_loadu_ps(W+k+8*r));
 for(int r=1;r<8;r++)a[0]=_mm256_add_ps(a[0],a[r]);
 y[0]=_mm256_cvtss_f32(a[0]);}

static void g1u8(const float*W,const float*x,float*y,int N,int K,int d){
 for(int i=0;i<N;i++){ __m256 a[8]; for(int r=0;r<8;r++)a[r]=_mm256_setzero_ps(); const float*w=W+(size_t)i*K;
  for(int k=0;k<K;k+=64) for(int r=0;r<8;r++) a[r]=_mm256_fmadd_ps(_mm256_loadu_ps(w+k+8*r),_mm256_loadu_ps(x+k+8*r),a[r]);
  for(int r=1;r<8;r++)a[0]=_mm256_add_ps(a[0],a[r]);
  __m128 s=_mm_add_ps(_mm256_castps256_ps128(a[0]),_mm256_extractf128_ps(a[0],1));
  s=_mm_hadd_ps(s,s); s=_mm_hadd_ps(s,s); y[i]=_mm_cvtss_f32(s);} }
int main(int argc,char**argv){ int N=11008,K=4096; size_t n=(size_t)N*K;
 float *A=aligned_alloc(64,n*4),*B=aligned_alloc(64,n*4),*x=aligned_alloc(64,16384*4),*y=aligned_alloc(64,16384*4);
 for(size_t i=0;i<n;i++){A[i]=(i%7)*0.1f;B[i]=(i%5)*0.1f;} for(int i=0;i<16384;i++)x[i]=1.0f;
 struct {const char*n;gemv_t f;} v[]={{"read",readbw},{"g4",g4},{"g8",g8},{"g1u8",g1u8},{"g4p256",g4p256},{"g8p256",g8p256},{"g8p512",g8p512},{"g4p1k",g4p1k},{"g8p1k",g8p1k},{"g8p1kt1",g8p1kt1}};
 int nv=sizeof v/sizeof v[0], rounds=15; double t[16][64];
 for(int r=0;r<rounds;r++) for(int j=0;j<nv;j++){ double s=now(); v[j].f(A,x,y,N,K,0); v[j].f(B,x,y,K,N,0); t[j][r]=now()-s; }
 for(int j=0;j<nv;j++){ double*a=t[j]; for(int p=0;p<rounds;p++)for(int q=p+1;q<rounds;q++)if(a[q]<a[p]){double z=a[p];a[p]=a[q];a[q]=z;}
  printf("%-10s median %.2f ms  %.1f GB/s  (p25 %.2f p75 %.2f)\n",v[j].n,a[rounds/2]*1e3,2*n*4/a[rounds/2]/1e9,a[rounds/4]*1e3,a[3*rounds/4]*1e3);}
 return 0;}
