/*
 * The floor of relaying through io_uring instead of epoll: the same job as relay.c (one
 * thread, every accepted client paired with its own server connection, bytes forwarded as they
 * arrive, nothing parsed), but every receive and send is a ring operation and one
 * io_uring_enter both submits the batch and waits for the next completions. It answers one
 * question for issue 4: how much of the kernel's share of relaying a different transport
 * removes. Not a pooler and not part of droid-pool.
 *
 * Usage: uring_relay LISTEN_PORT SERVER_PORT   (both on 127.0.0.1)
 *
 * Each connection has one receive buffer and one chain of operations in flight: a receive,
 * or a send of what it received to the peer linked to the next receive on the same buffer (so
 * the buffer is not reused before the send has taken it). Every chain ends in a receive's
 * completion. A pair is torn down by shutting both sockets down, which ends both chains, and
 * the descriptors are closed only then: a number the kernel hands out again can never meet a
 * completion meant for the connection that had it. Made for pgbench -S: a short send ends the
 * pair. Exits on SIGTERM.
 */
#include <liburing.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "floor.h"

#define MAX_FD 8192
#define BUF 16384

enum op { OP_ACCEPT = 1, OP_RECV = 2, OP_SEND = 3 };

static int peer[MAX_FD];
/* The pair is being torn down; no new operation starts on it. */
static char closing[MAX_FD];
/* The descriptor's chain has ended (only while closing). */
static char ended[MAX_FD];
static unsigned sent_len[MAX_FD];
static char bufs[MAX_FD][BUF];
static struct io_uring ring;

static uint64_t tag(enum op op, int fd) { return ((uint64_t)op << 32) | (uint32_t)fd; }

static struct io_uring_sqe *sqe(void) {
    struct io_uring_sqe *s = io_uring_get_sqe(&ring);
    if (!s) {
        io_uring_submit(&ring);
        s = io_uring_get_sqe(&ring);
    }
    return s;
}

static void arm_recv(int fd) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_recv(s, fd, bufs[fd], BUF, 0);
    io_uring_sqe_set_data64(s, tag(OP_RECV, fd));
}

static void arm_accept(int ls) {
    struct io_uring_sqe *s = sqe();
    io_uring_prep_multishot_accept(s, ls, NULL, NULL, 0);
    io_uring_sqe_set_data64(s, tag(OP_ACCEPT, ls));
}

/* Starts the teardown: both chains end once their sockets are shut down. */
static void end_pair(int fd) {
    int other = peer[fd];
    if (closing[fd]) return;
    closing[fd] = closing[other] = 1;
    shutdown(fd, SHUT_RDWR);
    shutdown(other, SHUT_RDWR);
}

/* The chain of fd (in a pair being torn down) has ended: close the pair once both have. */
static void chain_ended(int fd) {
    int other = peer[fd];
    ended[fd] = 1;
    if (!ended[other]) return;
    peer[fd] = peer[other] = -1;
    closing[fd] = closing[other] = ended[fd] = ended[other] = 0;
    close(fd);
    close(other);
}

static void pair_up(int client, int server_port) {
    int server = connect_server(client, server_port, MAX_FD);
    if (server < 0) return;
    peer[client] = server;
    peer[server] = client;
    arm_recv(client);
    arm_recv(server);
}

int main(int argc, char **argv) {
    for (int fd = 0; fd < MAX_FD; fd++) peer[fd] = -1;
    if (argc != 3) {
        fprintf(stderr, "usage: uring_relay LISTEN_PORT SERVER_PORT\n");
        return 2;
    }
    int server_port = atoi(argv[2]);
    int ls = listen_loopback(atoi(argv[1]));
    if (ls < 0) return 1;
    /* Completions are handled only when this thread asks for them: no interrupting task work. */
    struct io_uring_params p = {0};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    int r = io_uring_queue_init_params(4096, &ring, &p);
    if (r < 0) {
        /* Older kernels: plain ring. */
        memset(&p, 0, sizeof p);
        r = io_uring_queue_init_params(4096, &ring, &p);
    }
    if (r < 0) {
        fprintf(stderr, "uring_relay: io_uring_queue_init: %s\n", strerror(-r));
        return 1;
    }
    arm_accept(ls);
    for (;;) {
        r = io_uring_submit_and_wait(&ring, 1);
        if (r < 0 && r != -EINTR) {
            fprintf(stderr, "uring_relay: submit_and_wait: %s\n", strerror(-r));
            return 1;
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            uint64_t t = io_uring_cqe_get_data64(cqe);
            enum op op = (enum op)(t >> 32);
            int fd = (int)(uint32_t)t, res = cqe->res;
            if (op == OP_ACCEPT) {
                if (res >= 0) pair_up(res, server_port);
                if (!(cqe->flags & IORING_CQE_F_MORE)) arm_accept(ls);
            } else if (op == OP_RECV) {
                if (res <= 0) end_pair(fd);
                if (closing[fd]) {
                    chain_ended(fd);
                    continue;
                }
                struct io_uring_sqe *s = sqe();
                io_uring_prep_send(s, peer[fd], bufs[fd], (size_t)res, MSG_NOSIGNAL);
                io_uring_sqe_set_data64(s, tag(OP_SEND, fd));
                s->flags |= IOSQE_IO_LINK;
                sent_len[fd] = (unsigned)res;
                arm_recv(fd);
            } else if (op == OP_SEND) {
                /* A failed send cancels the linked receive, whose completion ends the chain. */
                if (res != (int)sent_len[fd]) end_pair(fd);
            }
        }
        io_uring_cq_advance(&ring, seen);
    }
}
