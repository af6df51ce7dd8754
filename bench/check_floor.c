// bench/check_floor.c: the kernel floor of a plain layer-4 health check on loopback, for
// bench/check_floor.py. RATE checks/s for SECS s, started at TICK_US ticks from one epoll
// loop that does nothing else, against bench/checks.py's target ports (127.0.K.1:20000+j,
// 250 per address): non-blocking connect with delayed ACK (TCP_QUICKACK 0), wait until
// writable, read SO_ERROR, close with a reset (SO_LINGER 0), as HAProxy 2.6 and sluice do.
// Prints its own CPU (user+system) per check: what no check scheduler can go under.
// With a 4th argument `reuse`, a finished check's socket is dissolved with connect(AF_UNSPEC)
// (the same reset) and kept for the next check, unregistered from epoll meanwhile, as sluice
// does: no socket()/close() per check.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <time.h>
static double cpu(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec*1e6+r.ru_utime.tv_usec+r.ru_stime.tv_sec*1e6+r.ru_stime.tv_usec;}
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int spare[4096], nspare=0;
int main(int argc,char**argv){
  int rate=atoi(argv[1]); double secs=atof(argv[2]); int tick=atoi(argv[3]); int nsrv=10000;
  int reuse=argc>4&&argv[4][0]=='r';
  int ep=epoll_create1(0); struct epoll_event ev,evs[256];
  double t0=now(), c0=cpu(); long started=0, ok=0, done=0; double next=t0;
  while(now()-t0<secs*1e6){
    double t=now();
    long due=(long)((t-t0)*rate/1e6);
    while(started<due){int i=started%nsrv; struct sockaddr_in a={0}; a.sin_family=AF_INET;
      a.sin_addr.s_addr=htonl((127<<24)|((i/250+1)<<8)|1); a.sin_port=htons(20000+i%250);
      int s=nspare?spare[--nspare]:socket(AF_INET,SOCK_STREAM|SOCK_NONBLOCK|SOCK_CLOEXEC,0);int z=0;setsockopt(s,IPPROTO_TCP,TCP_QUICKACK,&z,4);
      int r=connect(s,(void*)&a,sizeof a); if(r&&errno!=EINPROGRESS){perror("connect");return 1;}
      ev.events=EPOLLOUT|EPOLLET;ev.data.fd=s;epoll_ctl(ep,EPOLL_CTL_ADD,s,&ev);started++;}
    next+=tick; double wait=(next-now())/1000.0; int ms=wait>0?(int)(wait+0.999):0;
    int k=epoll_wait(ep,evs,256,ms);
    for(int q=0;q<k;q++){int s=evs[q].data.fd;int e=0;socklen_t l=4;getsockopt(s,SOL_SOCKET,SO_ERROR,&e,&l);if(!e)ok++;
      epoll_ctl(ep,EPOLL_CTL_DEL,s,0);
      struct sockaddr un={0};un.sa_family=AF_UNSPEC;
      if(reuse&&nspare<4096&&connect(s,&un,sizeof un)==0)spare[nspare++]=s;
      else{struct linger lg={1,0};setsockopt(s,SOL_SOCKET,SO_LINGER,&lg,sizeof lg);close(s);}
      done++;}
  }
  double c1=cpu(); printf("%s rate %d tick %dus: started %ld ok %ld cpu %.1f%% of a core, %.1f us/check\n",reuse?"reuse":"new",rate,tick,started,ok,(c1-c0)/(secs*1e6)*100,(c1-c0)/started);
}
