/* conns: what the server keeps of each open connection, the limits a client
 * cannot exhaust:
 *
 * - Per client address (--max-conns-per-ip): the connections open from each
 *   address, counted across all the loops' daemons. A connection over the
 *   limit is shut down as soon as it is accepted, before anything is read.
 *   (libmicrohttpd's MHD_OPTION_PER_IP_CONNECTION_LIMIT counts per daemon:
 *   with one daemon per loop on a shared listening socket, whichever loop
 *   wakes first takes most accepts, so a per-daemon share refused a client
 *   at 6 of 10 connections, and the full limit per daemon would admit
 *   loops x N.)
 * - The request deadline (--request-timeout-ms): a request's headers and body
 *   must be in within it, however slowly they trickle: libmicrohttpd's own
 *   timeout is an idle one, which every byte restarts, so a client sending a
 *   byte every few seconds (slowloris, slow body) would hold its connection
 *   for ever. A request starts when its connection opens, or, on a kept-alive
 *   connection, with the first byte after the previous answer (seen in the
 *   kernel's TCP_INFO at the sweep: libmicrohttpd does not say; an idle
 *   kept-alive connection stays libmicrohttpd's idle timeout's business).
 *   Once the request is all in (its handler runs) the deadline no longer
 *   applies: an order waiting for its lock is no slow client. A request past
 *   its deadline gets a 408 {"error","detail"} written on its socket, and the
 *   socket is shut down; libmicrohttpd sees the close and cleans up itself.
 *
 * One sweep per loop, a periodic timer on the loop's event base, checks the
 * loop's connections (no timer per connection). A sweep and its connections
 * belong to the loop's thread, which also runs its daemon (MHD_run and the
 * callbacks below), except conns_closed at MHD_stop_daemon, once the loop's
 * thread is gone. The per-address counts are shared (a mutex). Private to the
 * server (http.c, server.c). */
#ifndef SECKILL_CONNS_H
#define SECKILL_CONNS_H

#include <stdint.h>

struct event_base;
struct MHD_Connection;
struct conns_sweep;

/* Sets the per-address limit (0: none), before any loop runs. */
void conns_limit_per_addr(int max_per_addr);

/* A sweep of one loop's connections on base, every timeout_ms / 4 (at least
 * 50 ms, at most 1 s); each request it times out (408) is told to timed_out
 * with how long it waited. NULL when out of memory. */
struct conns_sweep *conns_sweep_new(struct event_base *base, int timeout_ms,
                                    void (*timed_out)(int64_t waited_us));

/* Stops the sweep and frees it; its connections must all be closed
 * (after MHD_stop_daemon). conns_sweep_free(NULL) is a no-op. */
void conns_sweep_free(struct conns_sweep *s);

/* Connection conn was accepted (MHD_CONNECTION_NOTIFY_STARTED) by the loop of
 * sweep s: counted for its address, or shut down when that address is at its
 * limit; its first request's clock starts now. Its state goes into
 * *socket_context. s NULL (off the loops): counted, no deadline. */
void conns_opened(struct conns_sweep *s, struct MHD_Connection *conn,
                  void **socket_context);

/* Connection closed (MHD_CONNECTION_NOTIFY_CLOSED): uncounted, forgotten. */
void conns_closed(void **socket_context);

/* conn's request's headers are in (the handler's first call): on a
 * kept-alive connection the sweep may not have seen it begin yet, its clock
 * starts now at the latest. */
void conns_headers_in(struct MHD_Connection *conn);

/* conn's request is all in: no deadline until its answer has been sent. */
void conns_request_in(struct MHD_Connection *conn);

/* conn's answer has been sent: its next request's clock starts with its
 * first byte. */
void conns_answer_sent(struct MHD_Connection *conn);

/* Since the start (/metrics): requests closed past their deadline,
 * connections refused for their address's limit. */
uint64_t conns_timeouts_total(void);
uint64_t conns_refused_total(void);

/* Connections open now, across every loop (any thread). */
int64_t conns_open(void);

#endif
