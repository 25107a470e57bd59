/* notify: the service manager told of the instance's state, as systemd's
 * Type=notify expects (sd_notify(3), libsystemd): READY=1 once it serves,
 * STOPPING=1 when it starts to drain. A no-op when the process was not
 * started with NOTIFY_SOCKET (not under systemd, or another Type=).
 * Any thread. */
#ifndef SECKILL_NOTIFY_H
#define SECKILL_NOTIFY_H

/* READY=1 with STATUS=serving: the first moment /readyz answers 200 (the
 * listening socket is open, the loops run, the data Redis answered a round
 * of health.c). */
void svc_notify_ready(void);
/* STOPPING=1 with STATUS=draining: SIGTERM or SIGINT came, the drain begins. */
void svc_notify_stopping(void);

#endif
