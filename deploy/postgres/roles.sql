-- The role seckill connects as (--postgres-file), with exactly what the sink and the pg
-- lock need: to log in to one database and own one schema, in which they create their
-- tables at start (seckill_schema, seckill_orders, seckill_events; seckill_locks and
-- seckill_rwlocks for --lock pg) and write them. No superuser, no CREATEDB/CREATEROLE,
-- no replication, no right in any other schema or database. LISTEN/NOTIFY (the pg
-- lock's wake-ups) need no grant.
--
--   createdb -O postgres seckill
--   psql -v ON_ERROR_STOP=1 -v password="$(cat /etc/seckill/pg-password)" \
--        -d seckill -f deploy/postgres/roles.sql
--
-- tests/it_deploy.sh runs it as it stands, then checks that the role can do no more.
CREATE ROLE seckill LOGIN PASSWORD :'password'
    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
REVOKE ALL ON DATABASE seckill FROM PUBLIC;
GRANT CONNECT ON DATABASE seckill TO seckill;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
CREATE SCHEMA seckill AUTHORIZATION seckill;
ALTER ROLE seckill IN DATABASE seckill SET search_path = seckill;
