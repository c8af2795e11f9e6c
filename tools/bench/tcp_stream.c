/* tcp_stream.c: the ceiling of one loopback TCP stream on this machine
 * (docs/BENCHMARKS.md): a thread writes HDR bytes and 1 MiB, 3000 times, with
 * writev; the main thread reads the header, then the payload in reads of at
 * most 256 KiB into 16 rotating 1 MiB buffers, as xfer's read loop does.
 * Usage: tcp_stream HDR PORT [CC]   (loopback; CC: the TCP congestion
 * control of both sockets, set before they connect, as xfer sets its own)
 *        tcp_stream HDR PORT CC recv|send ADDR   (the two ends as two
 * processes, for two network namespaces: recv listens on ADDR:PORT, reads
 * and prints the rate; send connects to ADDR:PORT and writes; CC "system"
 * leaves the system's default) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static int hdr; static size_t N=1<<20; static int fdw, fdr; static int iters=3000;
static void* writer(void*a){ char*p=mmap(0,N,3,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(p,1,N); char h[128]={0};
  for(int i=0;i<iters;i++){ struct iovec v[2]={{h,hdr},{p,N}}; size_t tot=hdr+N, done=0; while(done<tot){ ssize_t n=writev(fdw,v,2); if(n<=0){perror("w");exit(1);} done+=n; size_t m=n; for(int k=0;k<2;k++){ size_t t=m<v[k].iov_len?m:v[k].iov_len; v[k].iov_base=(char*)v[k].iov_base+t; v[k].iov_len-=t; m-=t;} } } return 0;}
static void setcc(int fd, const char*cc){ if(cc && strcmp(cc,"system") && setsockopt(fd,IPPROTO_TCP,TCP_CONGESTION,cc,strlen(cc))){perror("TCP_CONGESTION");exit(1);} }
static char*dst;
static void reader(int fd){ char h[128];
  for(int i=0;i<iters;i++){ size_t got=0; while(got<(size_t)hdr){ ssize_t n=read(fd,h+got,hdr-got); if(n<=0){perror("r");exit(1);} got+=n;} char*d=dst+(i%16)*N; got=0; while(got<N){ size_t want=N-got; if(want>262144)want=262144; ssize_t n=read(fd,d+got,want); if(n<=0){perror("r");exit(1);} got+=n;} } }
int main(int argc,char**argv){ hdr=atoi(argv[1]);
  dst=mmap(0,16*N,3,MAP_PRIVATE|MAP_ANONYMOUS,-1,0); memset(dst,0,16*N);
  const char*cc=argc>3?argv[3]:0;
  struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(atoi(argv[2])),.sin_addr.s_addr=htonl(0x7f000001)}; int one=1;
  if(argc>5){ if(inet_pton(AF_INET,argv[5],&a.sin_addr)!=1){fprintf(stderr,"tcp_stream: bad address %s\n",argv[5]);return 2;}
    if(!strcmp(argv[4],"send")){ fdw=socket(AF_INET,SOCK_STREAM,0); setcc(fdw,cc);
      for(int t=0;connect(fdw,(void*)&a,sizeof a);t++){ if(t>=100){perror("connect");return 1;} close(fdw); usleep(50000); fdw=socket(AF_INET,SOCK_STREAM,0); setcc(fdw,cc);}
      writer(0); return 0; }
    if(strcmp(argv[4],"recv")){fprintf(stderr,"tcp_stream: role %s: recv or send\n",argv[4]);return 2;}
    int ls=socket(AF_INET,SOCK_STREAM,0); setsockopt(ls,SOL_SOCKET,SO_REUSEADDR,&one,4); setcc(ls,cc);
    if(bind(ls,(void*)&a,sizeof a)||listen(ls,1)){perror("listen");return 1;}
    printf("listening\n"); fflush(stdout);
    fdr=accept(ls,0,0); double t0=now(); reader(fdr); double dt=now()-t0;
    printf("hdr %d: %.2f GB/s\n",hdr, iters*(double)N/dt/1e9); return 0; }
  int ls=socket(AF_INET,SOCK_STREAM,0); setsockopt(ls,SOL_SOCKET,SO_REUSEADDR,&one,4);
  fdw=socket(AF_INET,SOCK_STREAM,0);
  if(cc && (setsockopt(ls,IPPROTO_TCP,TCP_CONGESTION,cc,strlen(cc))||setsockopt(fdw,IPPROTO_TCP,TCP_CONGESTION,cc,strlen(cc)))){perror("TCP_CONGESTION");return 1;}
  bind(ls,(void*)&a,sizeof a); listen(ls,1); connect(fdw,(void*)&a,sizeof a); fdr=accept(ls,0,0);
  pthread_t t; double t0=now(); pthread_create(&t,0,writer,0);
  reader(fdr);
  pthread_join(t,0); double dt=now()-t0; printf("hdr %d: %.2f GB/s\n",hdr, iters*(double)N/dt/1e9); }
