/* hitload.c: the hit benchmarks' load generator in C, for when the client's own CPU is the
 * limit (on 2 cores it shares the machine with the server it measures).
 *
 * The same load as hitload.py, from the same plans: one thread, an epoll loop, raw HTTP/1.1 on
 * keep-alive connections with one request in flight each; HTTPS through one CONNECT tunnel per
 * connection, trusting the proxy's CA, with OpenSSL. Every answer is checked: status 200, the
 * plan's header line, and the exact body. Connections (their CONNECT and TLS handshake) are
 * opened before the clock starts; one that fails is counted as a failure and replaced.
 *
 * hitload.py's command line and its one JSON line of output, but the plan is the flat file
 * hitload.py's write_flat makes of a plan (hitbench.py does, for each server), with requests
 * and bodies as bytes, so this needs no JSON parser:
 *
 *   hitload-flat-1\n kind\n tunnel or -\n expect or -\n count\n
 *   then per item: "request-length body-length\n" request-bytes body-bytes
 *
 * A /virtual answer must be the exact bytes stbproxy writes; hitload.py also accepts the same
 * JSON written otherwise (an older tree's, say), this counts it as a failure.
 *
 * Build: cc -O2 -o hitload hitload.c -lssl -lcrypto -lm   (Debian: gcc, libssl-dev)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IO_TIMEOUT_MS 30000   /* a connection's CONNECT, handshake, or a stalled write */
#define IDLE_TIMEOUT_MS 60000 /* without any answer before a phase gives up */
#define MAX_SAMPLES 5
#define READ_CHUNK 65536

typedef struct {
    char *request, *body;
    size_t request_len, body_len;
} Item;

typedef struct {
    int fd;
    SSL *ssl;
    char *buf;
    size_t len, cap;
    long index; /* the item in flight, -1 when idle */
    double started;
} Conn;

static Item *items;
static size_t n_items;
static char kind[32], tunnel[256], expect[520]; /* expect: "\r\n<line, lower case>\r\n" or "" */
static int port;
static SSL_CTX *tls;
static int epfd;
static Conn **conns;
static size_t n_conns, conns_cap;
static long next_request, total;
static double *latencies;
static size_t n_latencies;
static long failures;
static char *samples[MAX_SAMPLES];
static int n_samples;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("hitload: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void fail(const char *fmt, ...) {
    failures++;
    if (n_samples < MAX_SAMPLES) {
        char text[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        samples[n_samples++] = strdup(text);
    }
}

/* -- the plan ---------------------------------------------------------------------------- */

static void read_line(FILE *f, char *out, size_t size, const char *what) {
    if (!fgets(out, (int)size, f)) die("the plan ends before its %s", what);
    out[strcspn(out, "\n")] = 0;
}

static void load_plan(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot read the plan %s: %s", path, strerror(errno));
    char line[512];
    read_line(f, line, sizeof line, "format line");
    if (strcmp(line, "hitload-flat-1") != 0) die("%s is not a flat plan (hitload.py --flatten writes one)", path);
    read_line(f, kind, sizeof kind, "kind");
    read_line(f, tunnel, sizeof tunnel, "tunnel");
    if (!strcmp(tunnel, "-")) tunnel[0] = 0;
    read_line(f, line, sizeof line, "expected header");
    expect[0] = 0;
    if (strcmp(line, "-") != 0) {
        for (char *c = line; *c; c++) *c = (char)tolower((unsigned char)*c);
        snprintf(expect, sizeof expect, "\r\n%s\r\n", line);
    }
    read_line(f, line, sizeof line, "item count");
    n_items = strtoul(line, NULL, 10);
    if (!n_items) die("the plan has no requests");
    items = calloc(n_items, sizeof *items);
    for (size_t i = 0; i < n_items; i++) {
        read_line(f, line, sizeof line, "item lengths");
        if (sscanf(line, "%zu %zu", &items[i].request_len, &items[i].body_len) != 2) die("bad item line %zu", i);
        items[i].request = malloc(items[i].request_len);
        items[i].body = malloc(items[i].body_len + 1);
        if (fread(items[i].request, 1, items[i].request_len, f) != items[i].request_len ||
            fread(items[i].body, 1, items[i].body_len, f) != items[i].body_len)
            die("the plan ends inside item %zu", i);
    }
    fclose(f);
    if (strcmp(kind, "https") == 0 && !tunnel[0]) die("an https plan needs a tunnel");
}

/* -- connections ------------------------------------------------------------------------- */

static int read_connect_reply(int fd) {
    char reply[4096];
    size_t len = 0;
    while (len < sizeof reply - 1) {
        ssize_t n = recv(fd, reply + len, sizeof reply - 1 - len, 0);
        if (n <= 0) return -1;
        len += (size_t)n;
        reply[len] = 0;
        if (strstr(reply, "\r\n\r\n")) return len >= 12 && memcmp(reply + 9, "200", 3) == 0 ? 0 : -1;
    }
    return -1;
}

/* A new connection, tunnelled and TLS-wrapped for https, then made non-blocking; NULL with the
 * reason counted as a failure. */
static Conn *open_conn(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    struct timeval timeout = {IO_TIMEOUT_MS / 1000, 0};
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        fail("connecting: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    SSL *ssl = NULL;
    if (tunnel[0]) {
        char head[600];
        int n = snprintf(head, sizeof head, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tunnel, tunnel);
        if (send(fd, head, (size_t)n, 0) != n || read_connect_reply(fd) != 0) {
            fail("connecting: CONNECT %s was not answered 200", tunnel);
            close(fd);
            return NULL;
        }
        char host[256];
        snprintf(host, sizeof host, "%s", tunnel);
        char *colon = strrchr(host, ':');
        if (colon) *colon = 0;
        ssl = SSL_new(tls);
        SSL_set_fd(ssl, fd);
        SSL_set_tlsext_host_name(ssl, host);
        SSL_set1_host(ssl, host);
        if (SSL_connect(ssl) != 1) {
            fail("connecting: TLS handshake: %s", ERR_error_string(ERR_get_error(), NULL));
            SSL_free(ssl);
            close(fd);
            return NULL;
        }
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    Conn *c = calloc(1, sizeof *c);
    c->fd = fd;
    c->ssl = ssl;
    c->index = -1;
    c->cap = READ_CHUNK * 2;
    c->buf = malloc(c->cap);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    if (n_conns == conns_cap) {
        conns_cap = conns_cap ? conns_cap * 2 : 64;
        conns = realloc(conns, conns_cap * sizeof *conns);
    }
    conns[n_conns++] = c;
    return c;
}

static void drop(Conn *c) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->ssl) SSL_free(c->ssl);
    close(c->fd);
    for (size_t i = 0; i < n_conns; i++)
        if (conns[i] == c) {
            conns[i] = conns[--n_conns];
            break;
        }
    free(c->buf);
    c->fd = -1; /* an event already fetched for it in this batch is skipped */
}

static void fill(long concurrency) {
    while ((long)n_conns < concurrency)
        if (!open_conn()) return;
}

/* Send the next request on c; 0 when the phase has none left. */
static int send_next(Conn *c) {
    if (next_request >= total) {
        c->index = -1;
        return 0;
    }
    long index = next_request++ % (long)n_items;
    c->index = index;
    c->started = now();
    const char *data = items[index].request;
    size_t left = items[index].request_len;
    while (left) { /* requests are small: this loops only under back-pressure */
        ssize_t n;
        short wait_for = POLLOUT;
        if (c->ssl) {
            n = SSL_write(c->ssl, data, (int)left);
            if (n <= 0) {
                int e = SSL_get_error(c->ssl, (int)n);
                if (e == SSL_ERROR_WANT_READ) wait_for = POLLIN;
                else if (e != SSL_ERROR_WANT_WRITE) break; /* gone: epoll reports it, reading fails */
            }
        } else {
            n = send(c->fd, data, left, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN) break;
        }
        if (n > 0) {
            data += n;
            left -= (size_t)n;
        } else {
            struct pollfd p = {.fd = c->fd, .events = wait_for};
            poll(&p, 1, IO_TIMEOUT_MS);
        }
    }
    return 1;
}

/* Read what has arrived: 1 while open, 0 when the server closed, -1 on an error. */
static int receive(Conn *c) {
    for (;;) {
        if (c->cap - c->len < READ_CHUNK) {
            c->cap *= 2;
            c->buf = realloc(c->buf, c->cap);
        }
        if (c->ssl) {
            int n = SSL_read(c->ssl, c->buf + c->len, READ_CHUNK);
            if (n > 0) {
                c->len += (size_t)n;
                if (SSL_pending(c->ssl)) continue; /* decrypted bytes epoll cannot see */
                return 1;
            }
            int e = SSL_get_error(c->ssl, n);
            if (e == SSL_ERROR_WANT_READ) return 1;
            if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0)) return 0;
            return -1;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, READ_CHUNK, 0);
        if (n > 0) {
            c->len += (size_t)n;
            if (n == READ_CHUNK) continue;
            return 1;
        }
        if (n == 0) return 0;
        return errno == EAGAIN ? 1 : -1;
    }
}

/* The complete answer at the front of the buffer: 1 with head and body lengths, 0 when more
 * must arrive, -1 when it has no Content-Length. */
static int answer(Conn *c, size_t *head_len, size_t *body_len) {
    char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
    if (!end) return 0;
    *head_len = (size_t)(end - c->buf) + 4;
    const char *key = "\r\ncontent-length:";
    size_t key_len = strlen(key);
    for (size_t i = 0; i + key_len <= *head_len; i++) {
        if (strncasecmp(c->buf + i, key, key_len) == 0) {
            *body_len = strtoul(c->buf + i + key_len, NULL, 10);
            return c->len >= *head_len + *body_len ? 1 : 0;
        }
    }
    return -1;
}

static void printable(char *out, size_t size, const char *data, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        unsigned char ch = (unsigned char)data[i];
        o += (size_t)snprintf(out + o, size - o, ch >= 32 && ch < 127 ? "%c" : "\\x%02x", ch);
    }
    out[o] = 0;
}

/* Why the answer is wrong, counted as a failure, or 0 when it is right. */
static int check(long index, const char *head, size_t head_len, const char *body, size_t body_len) {
    char shown[200];
    if (head_len < 12 || memcmp(head + 9, "200", 3) != 0) {
        printable(shown, sizeof shown, head, head_len < 160 ? head_len : 160);
        fail("not 200: %s", shown);
        return 1;
    }
    if (expect[0]) {
        size_t expect_len = strlen(expect);
        int found = 0;
        for (size_t i = 0; !found && i + expect_len <= head_len; i++)
            found = strncasecmp(head + i, expect, expect_len) == 0;
        if (!found) {
            printable(shown, sizeof shown, head, head_len < 160 ? head_len : 160);
            fail("no '%.*s' header: %s", (int)(expect_len - 4), expect + 2, shown);
            return 1;
        }
    }
    if (body_len != items[index].body_len || memcmp(body, items[index].body, body_len) != 0) {
        printable(shown, sizeof shown, body, body_len < 160 ? body_len : 160);
        fail("another body than expected: %s", shown);
        return 1;
    }
    return 0;
}

/* Count the request in flight on c as failed and put a new connection in its place; 1 when
 * the replacement has a request in flight. */
static int replace(Conn *c, const char *problem) {
    fail("%s", problem);
    drop(c);
    if (next_request >= total) return 0;
    Conn *fresh = open_conn();
    return fresh && send_next(fresh);
}

/* One phase of `requests` requests over `concurrency` connections; its seconds. */
static double phase(long requests, long concurrency, int measure, double deadline) {
    fill(concurrency);
    next_request = 0;
    total = requests;
    double started = now();
    long in_flight = 0;
    for (size_t i = 0; i < n_conns && (long)i < concurrency; i++) in_flight += send_next(conns[i]);
    struct epoll_event events[256];
    while (in_flight > 0) {
        double left = deadline - now();
        int wait_ms = left <= 0 ? 0 : left * 1000 < IDLE_TIMEOUT_MS ? (int)(left * 1000) : IDLE_TIMEOUT_MS;
        int ready = epoll_wait(epfd, events, 256, wait_ms);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            for (size_t i = n_conns; i-- > 0;)
                if (conns[i]->index >= 0) {
                    Conn *c = conns[i];
                    fail("no answer in time");
                    drop(c);
                    free(c);
                }
            break;
        }
        Conn *closed[256];
        int n_closed = 0;
        for (int e = 0; e < ready; e++) {
            Conn *c = events[e].data.ptr;
            if (c->fd < 0) continue; /* dropped earlier in this batch */
            if (c->index < 0) {       /* nothing asked on it: only a close can arrive */
                drop(c);
                closed[n_closed++] = c;
                continue;
            }
            int alive = receive(c);
            size_t head_len = 0, body_len = 0;
            int complete = alive < 0 ? 0 : answer(c, &head_len, &body_len);
            if (alive < 0 || complete < 0) {
                in_flight += replace(c, alive < 0 ? "reading failed" : "an answer without Content-Length") - 1;
                closed[n_closed++] = c;
                continue;
            }
            if (!complete) {
                if (!alive) {
                    in_flight += replace(c, "the server closed the connection") - 1;
                    closed[n_closed++] = c;
                }
                continue;
            }
            double elapsed = now() - c->started;
            if (!check(c->index, c->buf, head_len, c->buf + head_len, body_len) && measure)
                latencies[n_latencies++] = elapsed;
            size_t used = head_len + body_len;
            memmove(c->buf, c->buf + used, c->len - used);
            c->len -= used;
            if (!alive) {
                in_flight += replace(c, "the server closed a keep-alive connection") - 1;
                closed[n_closed++] = c;
            } else if (!send_next(c)) {
                in_flight--;
            }
        }
        for (int i = 0; i < n_closed; i++) free(closed[i]); /* after the batch: events may name them */
    }
    return now() - started;
}

/* -- output ------------------------------------------------------------------------------ */

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank, as scripts/common.py's percentile (round half to even, as Python's round). */
static double percentile(double pct) {
    size_t rank = (size_t)nearbyint(pct / 100 * (double)(n_latencies - 1));
    return latencies[rank < n_latencies ? rank : n_latencies - 1];
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 32 || ch >= 127) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die("%s needs a value", argv[*i]);
    return argv[++*i];
}

int main(int argc, char **argv) {
    const char *plan = NULL, *ca = NULL;
    long requests = -1, warmup = 0, concurrency = -1;
    double timeout = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port")) port = atoi(value(argc, argv, &i));
        else if (!strcmp(argv[i], "--plan")) plan = value(argc, argv, &i);
        else if (!strcmp(argv[i], "--requests")) requests = atol(value(argc, argv, &i));
        else if (!strcmp(argv[i], "--warmup")) warmup = atol(value(argc, argv, &i));
        else if (!strcmp(argv[i], "--concurrency")) concurrency = atol(value(argc, argv, &i));
        else if (!strcmp(argv[i], "--ca")) ca = value(argc, argv, &i);
        else if (!strcmp(argv[i], "--timeout")) timeout = atof(value(argc, argv, &i));
        else die("unknown argument %s", argv[i]);
    }
    if (!port || !plan || requests < 1 || concurrency < 1)
        die("usage: hitload --port P --plan FLAT --requests N --concurrency C [--warmup W] [--ca FILE] [--timeout S]");
    load_plan(plan);
    if (tunnel[0]) {
        tls = SSL_CTX_new(TLS_client_method());
        SSL_CTX_set_verify(tls, SSL_VERIFY_PEER, NULL);
        if (!ca || SSL_CTX_load_verify_locations(tls, ca, NULL) != 1) die("https needs the proxy's CA (--ca)");
    }
    epfd = epoll_create1(0);
    latencies = malloc((size_t)requests * sizeof *latencies);
    double deadline = now() + timeout;
    if (warmup) phase(warmup, concurrency, 0, deadline);
    fill(concurrency); /* handshakes stay out of the measurement */
    double cpu = cpu_seconds();
    double seconds = phase(requests, concurrency, 1, deadline);
    cpu = cpu_seconds() - cpu;
    qsort(latencies, n_latencies, sizeof *latencies, by_value);
    printf("{\"requests\": %ld, \"ok\": %zu, \"failures\": %ld, \"samples\": [", requests, n_latencies, failures);
    for (int i = 0; i < n_samples; i++) {
        if (i) printf(", ");
        json_string(samples[i]);
    }
    printf("], \"seconds\": %.6f, \"rps\": %.3f, ", seconds, seconds > 0 ? n_latencies / seconds : 0.0);
    if (n_latencies) /* else NaN, as Python's json writes it */
        printf("\"p50_ms\": %.6f, \"p99_ms\": %.6f, ", percentile(50) * 1e3, percentile(99) * 1e3);
    else
        printf("\"p50_ms\": NaN, \"p99_ms\": NaN, ");
    printf("\"client_cpu_s\": %.6f}\n", cpu);
    return 0;
}
