/* tcp_pingpong.c: the floor of a 1 MiB GET over loopback TCP on this
 * machine (docs/BENCHMARKS.md). One process asks with 48 bytes and the other
 * answers with 48 + 1 MiB, on blocking sockets with TCP_NODELAY, one request
 * at a time: the least work a TCP request/response can do.
 * Usage: tcp_pingpong PORT [CC]   (loopback; CC: the congestion control of
 * both sockets, set before they connect, as xfer sets it)
 *        tcp_pingpong PORT CC server|client ADDR   (the two ends as two
 * processes, for two network namespaces: server listens on ADDR:PORT and
 * answers; client connects to ADDR:PORT, asks and prints the result; CC
 * "system" leaves the system's default) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static size_t N=1<<20; static int iters=2000;
static void rd(int fd, char*b, size_t n, size_t chunk){ size_t got=0; while(got<n){ size_t w=n-got; if(w>chunk)w=chunk; ssize_t m=read(fd,b+got,w); if(m<=0){perror("read");exit(1);} got+=m;} }
static void wr(int fd, char*b, size_t n){ size_t d=0; while(d<n){ ssize_t m=write(fd,b+d,n-d); if(m<=0){perror("write");exit(1);} d+=m;} }
static void setcc(int fd, const char*cc){ if(cc && strcmp(cc,"system") && setsockopt(fd,IPPROTO_TCP,TCP_CONGESTION,cc,strlen(cc))){perror("TCP_CONGESTION");exit(1);} }
static void answer(int ls){ int one=1; int fd=accept(ls,0,0); setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4); char*v=mmap(0,N+64,3,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(v,7,N+64); char req[48];
  for(int i=0;i<iters;i++){ rd(fd,req,48,48); wr(fd,v,N+48);} }
static int cmp(const void*x,const void*y){double d=*(double*)x-*(double*)y; return d<0?-1:d>0;}
static void ask(int fd){ int one=1; setsockopt(fd,IPPROTO_TCP,TCP_NODELAY,&one,4);
  char*dst=mmap(0,N+64,3,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(dst,0,N+64); char req[48]={0}; double*lat=malloc(iters*sizeof(double));
  double t0=now(); for(int i=0;i<iters;i++){ double s=now(); wr(fd,req,48); rd(fd,dst,N+48,262144); lat[i]=now()-s;} double dt=now()-t0;
  qsort(lat,iters,sizeof(double),cmp);
  printf("c1 1MiB ping-pong: %.0f ops/s %.2f GB/s p50 %.0f us p99 %.0f us p99.9 %.0f us\n", iters/dt, iters*(double)N/dt/1e9, lat[iters/2]*1e6, lat[iters*99/100]*1e6, lat[iters*999/1000]*1e6); }
int main(int argc,char**argv){ int port=atoi(argv[1]);
  struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(port),.sin_addr.s_addr=htonl(0x7f000001)}; int one=1;
  const char*cc=argc>2?argv[2]:0;
  if(argc>4){ if(inet_pton(AF_INET,argv[4],&a.sin_addr)!=1){fprintf(stderr,"tcp_pingpong: bad address %s\n",argv[4]);return 2;}
    if(!strcmp(argv[3],"client")){ int fd=socket(AF_INET,SOCK_STREAM,0); setcc(fd,cc);
      for(int t=0;connect(fd,(void*)&a,sizeof a);t++){ if(t>=100){perror("connect");return 1;} close(fd); usleep(50000); fd=socket(AF_INET,SOCK_STREAM,0); setcc(fd,cc);}
      ask(fd); return 0; }
    if(strcmp(argv[3],"server")){fprintf(stderr,"tcp_pingpong: role %s: server or client\n",argv[3]);return 2;}
    int ls=socket(AF_INET,SOCK_STREAM,0); setsockopt(ls,SOL_SOCKET,SO_REUSEADDR,&one,4); setcc(ls,cc);
    if(bind(ls,(void*)&a,sizeof a)||listen(ls,1)){perror("listen");return 1;}
    printf("listening\n"); fflush(stdout); answer(ls); return 0; }
  int ls=socket(AF_INET,SOCK_STREAM,0); setsockopt(ls,SOL_SOCKET,SO_REUSEADDR,&one,4);
  if(cc && setsockopt(ls,IPPROTO_TCP,TCP_CONGESTION,cc,strlen(cc))){perror("TCP_CONGESTION");return 1;}
  bind(ls,(void*)&a,sizeof a); listen(ls,1);
  if(fork()==0){ answer(ls); exit(0);}
  int fd=socket(AF_INET,SOCK_STREAM,0);
  if(cc && setsockopt(fd,IPPROTO_TCP,TCP_CONGESTION,cc,strlen(cc))){perror("TCP_CONGESTION");return 1;}
  connect(fd,(void*)&a,sizeof a);
  ask(fd); wait(0);}
