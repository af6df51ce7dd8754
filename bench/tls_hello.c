/* bench/tls_hello.c: a cheap TLS handshake storm client for bench/tls_storm.py --client c.
 *
 *   tls_hello PORT CLIENTS SECONDS HELLO_FILE FLIGHT_BYTES OUT_JSON
 *
 * CLIENTS connections at once to 127.0.0.1:PORT, each: non-blocking connect, send the
 * ClientHello read from HELLO_FILE, read until FLIGHT_BYTES of the server's first flight
 * arrived (the server's key exchange and signature are done then), close with a reset,
 * start over; for SECONDS. No crypto on this side: one epoll loop costs a few µs of user time
 * per handshake, so the proxy, not the client, is what saturates (the Python storm client
 * is the bottleneck on two cores). Connect + flight has 5 s, or it counts as a timeout.
 * Writes {"done", "timeouts", "errors", "hs": [seconds per handshake...]} to OUT_JSON.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct conn {
	int fd;
	int sent;
	long got;
	double t0;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int port, efd;
static struct sockaddr_in dst;
static char hello[16384];
static long hello_len, flight;
static long done_n, timeouts, errors;
static double *lat;
static long lat_n, lat_cap;

static void reset_close(int fd)
{
	struct linger l = { 1, 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

static void open_conn(struct conn *c)
{
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (fd < 0) {
			perror("socket");
			exit(1);
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->sent = 0;
		c->got = 0;
		c->t0 = now();
		if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS) {
			errors++;
			close(fd);
			usleep(1000);
			continue;
		}
		struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN, .data.ptr = c };
		epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ev);
		return;
	}
}

static void restart(struct conn *c)
{
	reset_close(c->fd);
	open_conn(c);
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s PORT CLIENTS SECONDS HELLO_FILE FLIGHT_BYTES OUT_JSON\n", argv[0]);
		return 2;
	}
	port = atoi(argv[1]);
	int clients = atoi(argv[2]);
	double secs = atof(argv[3]);
	FILE *f = fopen(argv[4], "rb");
	if (!f) {
		perror(argv[4]);
		return 1;
	}
	hello_len = fread(hello, 1, sizeof(hello), f);
	fclose(f);
	/* ECDSA signatures vary by a few bytes: the flight is there when all but 8 bytes are. */
	flight = atol(argv[5]) - 8;
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons(port);
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	lat_cap = 1 << 20;
	lat = malloc(lat_cap * sizeof(double));
	efd = epoll_create1(0);
	struct conn *cs = calloc(clients, sizeof(*cs));
	for (int i = 0; i < clients; i++)
		open_conn(&cs[i]);
	double end = now() + secs, next_scan = now() + 0.1;
	struct epoll_event evs[256];
	char buf[65536];
	while (now() < end) {
		int n = epoll_wait(efd, evs, 256, 50);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (evs[i].events & (EPOLLERR | EPOLLHUP) && !(evs[i].events & EPOLLIN)) {
				errors++;
				restart(c);
				continue;
			}
			if (!c->sent && (evs[i].events & EPOLLOUT)) {
				if (write(c->fd, hello, hello_len) != hello_len) {
					errors++;
					restart(c);
					continue;
				}
				c->sent = 1;
				struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
				epoll_ctl(efd, EPOLL_CTL_MOD, c->fd, &ev);
			}
			if (evs[i].events & EPOLLIN) {
				ssize_t r;
				while ((r = read(c->fd, buf, sizeof(buf))) > 0)
					c->got += r;
				if (c->got >= flight) {
					if (lat_n < lat_cap)
						lat[lat_n++] = now() - c->t0;
					done_n++;
					restart(c);
				} else if (r == 0 || (r < 0 && errno != EAGAIN)) {
					errors++;
					restart(c);
				}
			}
		}
		double t = now();
		if (t >= next_scan) {
			next_scan = t + 0.1;
			for (int i = 0; i < clients; i++)
				if (t - cs[i].t0 > 5.0) {
					timeouts++;
					restart(&cs[i]);
				}
		}
	}
	FILE *o = fopen(argv[6], "w");
	if (!o) {
		perror(argv[6]);
		return 1;
	}
	fprintf(o, "{\"done\": %ld, \"timeouts\": %ld, \"errors\": %ld, \"hs\": [", done_n, timeouts, errors);
	for (long i = 0; i < lat_n; i++)
		fprintf(o, "%s%.6f", i ? ", " : "", lat[i]);
	fprintf(o, "]}\n");
	fclose(o);
	return 0;
}
