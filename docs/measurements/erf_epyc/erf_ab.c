#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <math.h>
static const float P[7]={8.006874122656882e-05f,-8.053751080296934e-04f,5.192957818508148e-03f,-2.68560703843832e-02f,1.1283634603023529e-01f,-3.761262893676758e-01f,1.128379225730896f};
static const float Q[13]={-9.124747521127574e-06f,2.542066795285791e-05f,5.1667077059391886e-05f,-0.0003016761620528996f,0.00039112992817535996f,0.00046216780901886523f,-0.002963507315143943f,0.006797654088586569f,-0.009904828853905201f,0.009832995943725109f,-0.006535762920975685f,0.0026561934500932693f,0.9994966983795166f};
#define N (1<<20)
static inline __m512 erf_two(__m512 x){
  __m512 ax=_mm512_abs_ps(x), s=_mm512_mul_ps(ax,ax);
  __m512 p=_mm512_set1_ps(P[0]); for(int i=1;i<7;i++) p=_mm512_fmadd_ps(p,s,_mm512_set1_ps(P[i]));
  __m512 small=_mm512_mul_ps(ax,p);
  __m512 t=_mm512_sub_ps(_mm512_min_ps(ax,_mm512_set1_ps(3.92f)),_mm512_set1_ps(2.46f));
  __m512 q=_mm512_set1_ps(Q[0]); for(int i=1;i<13;i++) q=_mm512_fmadd_ps(q,t,_mm512_set1_ps(Q[i]));
  __mmask16 far=_mm512_cmp_ps_mask(ax,_mm512_set1_ps(3.92f),_CMP_GE_OQ);
  q=_mm512_mask_mov_ps(q,far,_mm512_set1_ps(1.f));
  __mmask16 near=_mm512_cmp_ps_mask(ax,_mm512_set1_ps(1.f),_CMP_LT_OQ);
  __m512 r=_mm512_mask_mov_ps(q,near,small);
  return _mm512_or_ps(r,_mm512_and_ps(x,_mm512_set1_ps(-0.f)));
}
static inline __m512 erf_blend(__m512 x){
  __m512 ax=_mm512_abs_ps(x), s=_mm512_mul_ps(ax,ax);
  __mmask16 near=_mm512_cmp_ps_mask(ax,_mm512_set1_ps(1.f),_CMP_LT_OQ);
  __m512 t=_mm512_sub_ps(_mm512_min_ps(ax,_mm512_set1_ps(3.92f)),_mm512_set1_ps(2.46f));
  __m512 v=_mm512_mask_mov_ps(t,near,s);
  __m512 q=_mm512_mask_mov_ps(_mm512_set1_ps(Q[0]),near,_mm512_setzero_ps());
  for(int i=1;i<13;i++){ __m512 c=_mm512_set1_ps(Q[i]); if(i>=6) c=_mm512_mask_mov_ps(c,near,_mm512_set1_ps(P[i-6])); else c=_mm512_maskz_mov_ps(~near,c); q=_mm512_fmadd_ps(q,v,c);}
  __m512 small=_mm512_mul_ps(ax,q);
  __mmask16 far=_mm512_cmp_ps_mask(ax,_mm512_set1_ps(3.92f),_CMP_GE_OQ);
  q=_mm512_mask_mov_ps(q,far,_mm512_set1_ps(1.f));
  __m512 r=_mm512_mask_mov_ps(q,near,small);
  return _mm512_or_ps(r,_mm512_and_ps(x,_mm512_set1_ps(-0.f)));
}


#define C(c,i) _mm512_set1_ps(c[i])
#define FMA _mm512_fmadd_ps
static inline __m512 estrin7(__m512 x, const float* c){ /* c highest first: c[6] is x^0 */
  __m512 x2=_mm512_mul_ps(x,x), x4=_mm512_mul_ps(x2,x2);
  __m512 a0=FMA(C(c,5),x,C(c,6)), a1=FMA(C(c,3),x,C(c,4)), a2=FMA(C(c,1),x,C(c,2));
  __m512 b0=FMA(a1,x2,a0), b1=FMA(C(c,0),x2,a2);
  return FMA(b1,x4,b0);
}
static inline __m512 estrin13(__m512 x, const float* c){ /* c[12] is x^0 */
  __m512 x2=_mm512_mul_ps(x,x), x4=_mm512_mul_ps(x2,x2), x8=_mm512_mul_ps(x4,x4);
  __m512 a0=FMA(C(c,11),x,C(c,12)), a1=FMA(C(c,9),x,C(c,10)), a2=FMA(C(c,7),x,C(c,8)),
         a3=FMA(C(c,5),x,C(c,6)), a4=FMA(C(c,3),x,C(c,4)), a5=FMA(C(c,1),x,C(c,2));
  __m512 b0=FMA(a1,x2,a0), b1=FMA(a3,x2,a2), b2=FMA(a5,x2,a4);
  __m512 lo=FMA(b1,x4,b0), hi=FMA(C(c,0),x4,b2);
  return FMA(hi,x8,lo);
}
#define estrin(x,c,n) estrin##n(x,c)
static inline __m512 erf_estrin(__m512 x){
  __m512 ax=_mm512_abs_ps(x), s=_mm512_mul_ps(ax,ax);
  __m512 small=_mm512_mul_ps(ax,estrin(s,P,7));
  __m512 t=_mm512_sub_ps(_mm512_min_ps(ax,_mm512_set1_ps(3.92f)),_mm512_set1_ps(2.46f));
  __m512 q=estrin(t,Q,13);
  __mmask16 far=_mm512_cmp_ps_mask(ax,_mm512_set1_ps(3.92f),_CMP_GE_OQ);
  q=_mm512_mask_mov_ps(q,far,_mm512_set1_ps(1.f));
  __mmask16 near=_mm512_cmp_ps_mask(ax,_mm512_set1_ps(1.f),_CMP_LT_OQ);
  __m512 r=_mm512_mask_mov_ps(q,near,small);
  return _mm512_or_ps(r,_mm512_and_ps(x,_mm512_set1_ps(-0.f)));
}
#define GELU(F) static void gelu_##F(const float*in,float*out){ for(int i=0;i<N;i+=16){__m512 x=_mm512_loadu_ps(in+i); __m512 e=F(_mm512_mul_ps(x,_mm512_set1_ps(0.70710677f))); _mm512_storeu_ps(out+i,_mm512_mul_ps(x,_mm512_fmadd_ps(e,_mm512_set1_ps(.5f),_mm512_set1_ps(.5f))));}}
GELU(erf_two) GELU(erf_blend) GELU(erf_estrin)
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
static double max_diff(const float*a,const float*b){double m=0;for(int i=0;i<N;i++){double d=fabs(a[i]-b[i]);if(d>m)m=d;}return m;}
enum{R=301};
/* one variant against the shipped form: medians of both times and of the rounds' own ratios */
static void report(const char*name,double*two,double*alt,double*ratio,double diff){
  qsort(two,R,8,cmp);qsort(alt,R,8,cmp);qsort(ratio,R,8,cmp);
  printf("%s: two %.3f ms, %s %.3f ms, %s/two median %.3f (q %.3f-%.3f), max diff %g\n",name,
         two[R/2]*1e3,name,alt[R/2]*1e3,name,ratio[R/2],ratio[R/4],ratio[3*R/4],diff);
}
int main(){
  float*in=aligned_alloc(64,N*4),*o1=aligned_alloc(64,N*4),*o2=aligned_alloc(64,N*4),*o3=aligned_alloc(64,N*4);
  srand(1); for(int i=0;i<N;i++) in[i]=((rand()/(float)RAND_MAX)-0.5f)*8.f;
  gelu_erf_two(in,o1); gelu_erf_blend(in,o2); gelu_erf_estrin(in,o3);
  double db=max_diff(o1,o2), de=max_diff(o1,o3);
  static double a1[R],b[R],rb[R],a2[R],e[R],re[R];
  for(int k=0;k<R;k++){ /* every round: two, blend, two, estrin */
    double t=now(); gelu_erf_two(in,o1); double u=now(); gelu_erf_blend(in,o2); double w=now();
    gelu_erf_two(in,o1); double x=now(); gelu_erf_estrin(in,o3); double y=now();
    a1[k]=u-t;b[k]=w-u;rb[k]=b[k]/a1[k];a2[k]=x-w;e[k]=y-x;re[k]=e[k]/a2[k];}
  report("blend",a1,b,rb,db); report("estrin",a2,e,re,de);
}
