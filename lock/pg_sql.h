/* pg_sql: the statements of the pg lock (lock_pg.c, the recipe; pg_lease.c,
 * the watchdog's renewals), per side: the plain lock's on its table
 * seckill_locks, the read-write lock's on seckill_rwlocks. Text only: nothing
 * here runs a query or calls another file. Private to lock/.
 *
 * Every statement of one side takes the same parameters as the other
 * side's, so that a caller picks the text by the side and sends the same
 * values: see each field. */
#ifndef SECKILL_PG_SQL_H
#define SECKILL_PG_SQL_H

#include "lock.h"

struct pg_sql {
    const char *table; /* CREATE TABLE IF NOT EXISTS, no parameters */
    const char *row;   /* the key's row, made if missing: $1 key */
    /* The conditional UPDATE of an attempt: $1 key, $2 owner (a fresh token
     * per acquire), $3 the lease in ms, $4 (nparams 4: the write side) how
     * long a waiting writer's intent keeps new readers out, ms (0: it does
     * not wait). One row of three values: the version granted (NULL: not
     * granted; 1 for a read, which carries no token), whether the key's row
     * exists (count), the lease left in ms of what keeps it out (NULL when
     * nothing seen). */
    const char *acquire;
    int nparams;
    /* The release of a grant: $1 key, $2 owner, $3 version; a row (it
     * NOTIFYs PG_CHANNEL with the key) when it was held. */
    const char *release;
    /* Lets go of whatever owner holds or asked for, unchecked by version (a
     * grant nobody took, a writer's intent when it gives up): $1 key, $2
     * owner; NOTIFYs when it changed the row. */
    const char *let_go;
    /* The watchdog's renewal of a lease not run out: $1 key, $2 owner, $3
     * version, $4 the lease in ms; a row when renewed. */
    const char *renew;
    /* 1: every statement but table takes two more parameters, last: the
     * readers' prefix and their count (lock_rw_write_over); row takes $1
     * key, $2 prefix, $3 count. */
    int segs;
};

/* The statements of side (LOCK_EXCLUSIVE: the plain lock). */
const struct pg_sql *pg_sql_of(lock_side side);
/* The plain lock's, as a reader of a read-write lock (lock_step_read_of):
 * refused while a writer's mark on its row runs. */
const struct pg_sql *pg_sql_reading(void);
/* The write side's, over plain locks that are its readers
 * (lock_rw_write_over): segs. */
const struct pg_sql *pg_sql_over(void);

#endif
