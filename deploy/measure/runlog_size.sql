-- Writes :n fires of one job with their successful first run, as the engine
-- records them, then reports the on-disk size of `fires` and `runs` with
-- their indexes. :out is the length of each run's output. Run by runlog-size.
\set ON_ERROR_STOP on
INSERT INTO fires (job_id, trigger, scheduled_at, state, claimed_by, claimed_at, created_at)
SELECT 1, 'schedule', 1764000000000 + g * 1000, 'claimed', 'qiwu-worker-7d9c8b5f4-x2x9k',
       1764000000000 + g * 1000 + 3, 1764000000000 + g * 1000 + 3
FROM generate_series(1, :n) AS g;
INSERT INTO runs (fire_id, job_id, job_name, handler, trigger, scheduled_at, attempt, status,
                  started_at, finished_at, duration_ms, instance, output, error, deleted_at)
SELECT f.id, 1, 'nightly echo', 'demo.echo', 'schedule', f.scheduled_at, 1, 'success',
       f.scheduled_at + 3, f.scheduled_at + 15, 12, 'qiwu-worker-7d9c8b5f4-x2x9k',
       repeat('x', :out), '', NULL
FROM fires f;
VACUUM ANALYZE fires;
VACUUM ANALYZE runs;
SELECT relname,
       pg_size_pretty(pg_table_size(oid)) AS heap_and_toast,
       pg_size_pretty(pg_indexes_size(oid)) AS indexes,
       pg_total_relation_size(oid) AS total_bytes
FROM pg_class WHERE relname IN ('fires', 'runs') ORDER BY relname;
