/*
 * What the two minimal relays (relay.c over epoll, uring_relay.c over io_uring) share: the
 * listening socket and the server connection each client gets, both on 127.0.0.1.
 */
#ifndef FLOOR_H
#define FLOOR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    return a;
}

/* A listening socket on 127.0.0.1:port, or -1 (reported). */
static int listen_loopback(int port) {
    int one = 1;
    struct sockaddr_in la = loopback(port);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ls < 0 || bind(ls, (struct sockaddr *)&la, sizeof la) != 0 || listen(ls, 1024) != 0) {
        perror("relay: listen");
        return -1;
    }
    return ls;
}

/*
 * Connects the server connection for an accepted client, both with TCP_NODELAY, and returns
 * it. On failure (or a descriptor at or above max_fd) closes the client and returns -1.
 */
static int connect_server(int client, int server_port, int max_fd) {
    int one = 1;
    struct sockaddr_in sa = loopback(server_port);
    int server = socket(AF_INET, SOCK_STREAM, 0);
    if (client >= max_fd || server < 0 || server >= max_fd ||
        connect(server, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("relay: connect to server");
        close(client);
        if (server >= 0) close(server);
        return -1;
    }
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return server;
}

#endif
