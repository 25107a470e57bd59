/* version: what this build is, as `seckill --version` and /metrics'
 * seckill_build_info say. Set by the Makefile (SECKILL_VERSION,
 * SECKILL_COMMIT: git describe and the commit, or given to make); "unknown"
 * when built without them (the fuzz target). Any thread. */
#ifndef SECKILL_VERSION_H
#define SECKILL_VERSION_H

/* The version, e.g. "v1.2-3-gabc123" or a bare commit when untagged. */
const char *svc_version(void);
/* The commit built, abbreviated ("-dirty" never: see svc_version). */
const char *svc_commit(void);

#endif
