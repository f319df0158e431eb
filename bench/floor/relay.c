/*
 * The floor of a relaying pooler's CPU per transaction, measured by the benchmark next to
 * droid-pool and PgBouncer. Not a pooler and not part of droid-pool: one thread, one epoll
 * set, and for every accepted client its own connection to the server (no pooling). Bytes
 * are forwarded as they arrive, one recv and one send per readiness, nothing parsed, nothing
 * buffered. What this spends is about the kernel's share of relaying over loopback TCP, which
 * every relay pays; a real pooler's own work comes on top. Not a strict bound: it holds one
 * server connection per client where a pool holds fewer, and its epoll is level-triggered.
 *
 * Usage: relay LISTEN_PORT SERVER_PORT   (both on 127.0.0.1)
 *
 * Made for pgbench -S only: sends are blocking, which is safe for replies far smaller than
 * a socket buffer. Exits on SIGTERM (the default action).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "floor.h"

#define MAX_FD 65536

static int peer[MAX_FD];
static char buf[65536];

static void watch(int ep, int fd) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static void pair_up(int ep, int client, int server_port) {
    int server = connect_server(client, server_port, MAX_FD);
    if (server < 0) return;
    peer[client] = server;
    peer[server] = client;
    watch(ep, client);
    watch(ep, server);
}

int main(int argc, char **argv) {
    for (int fd = 0; fd < MAX_FD; fd++) peer[fd] = -1;
    if (argc != 3) {
        fprintf(stderr, "usage: relay LISTEN_PORT SERVER_PORT\n");
        return 2;
    }
    int server_port = atoi(argv[2]);
    int ls = listen_loopback(atoi(argv[1]));
    if (ls < 0) return 1;
    int ep = epoll_create1(0);
    watch(ep, ls);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        if (n < 0 && errno != EINTR) {
            perror("relay: epoll_wait");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == ls) {
                int client = accept(ls, NULL, NULL);
                if (client >= 0) pair_up(ep, client, server_port);
                continue;
            }
            if (peer[fd] < 0) continue; /* closed earlier in this batch */
            /* MSG_DONTWAIT: an event left over for a number reused by accept never blocks. */
            ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (got <= 0) {
                /* Closing both ends also removes them from the epoll set. */
                int other = peer[fd];
                peer[fd] = peer[other] = -1;
                close(other);
                close(fd);
                continue;
            }
            for (ssize_t off = 0; off < got;) {
                ssize_t put = send(peer[fd], buf + off, (size_t)(got - off), MSG_NOSIGNAL);
                if (put <= 0) break;
                off += put;
            }
        }
    }
}
