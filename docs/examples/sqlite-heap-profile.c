/*
 * A heap profile of a real program: SQLite building and querying a 300 000-row in-memory
 * database under nodalloc (docs/examples/sqlite-heap-profile.md shows what comes out).
 *
 * From the nodalloc checkout, after `cargo build --release -p nodalloc-cli -p nodalloc-ffi`:
 * the SQLite amalgamation (3.54.1) as go-sqlite3 ships it, fetched through the Go module
 * proxy, both built with frame pointers so that the profile's stacks are deep and named,
 * then profiled at one sample per 64 KiB allocated:
 *
 *   REPO=$PWD
 *   go mod download github.com/mattn/go-sqlite3@v1.14.53
 *   SQLITE=$(go env GOMODCACHE)/github.com/mattn/go-sqlite3@v1.14.53
 *   mkdir -p /tmp/sqlite-example && cd /tmp/sqlite-example
 *   cc -O2 -g -fno-omit-frame-pointer -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION \
 *      -c "$SQLITE/sqlite3-binding.c" -o sqlite3.o
 *   cc -std=c11 -Wall -Wextra -O2 -g -fno-omit-frame-pointer -I"$SQLITE" \
 *      "$REPO/docs/examples/sqlite-heap-profile.c" sqlite3.o -lm -o sqlite-heap-profile
 *   "$REPO/target/release/nodalloc" run --profile sqlite.pb.gz --profile-rate 64K -- \
 *      ./sqlite-heap-profile
 *   "$REPO/target/release/nodalloc" profile top -n 12 sqlite.pb.gz
 *   "$REPO/target/release/nodalloc" profile flamegraph sqlite.pb.gz > sqlite-heap-profile.svg
 *
 * The database and the last query's cursor are left open on purpose: the profile is written
 * at exit and shows what they hold.
 */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3-binding.h"

enum { ROWS = 300000, BATCH = 10000, CATEGORIES = 50 };

static sqlite3 *db;

static void check(int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_ROW && rc != SQLITE_DONE) {
        fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static void exec(const char *sql) { check(sqlite3_exec(db, sql, NULL, NULL, NULL), sql); }

static sqlite3_stmt *prepare(const char *sql) {
    sqlite3_stmt *stmt;
    check(sqlite3_prepare_v2(db, sql, -1, &stmt, NULL), sql);
    return stmt;
}

static unsigned long long seed = 0x9e3779b97f4a7c15ULL;
static unsigned long long next(void) { /* xorshift64: the same rows on every run */
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
}

int main(void) {
    check(sqlite3_open(":memory:", &db), "open");
    exec("PRAGMA cache_size=-65536"); /* 64 MiB: also what the sorter may keep in memory */
    exec("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT NOT NULL,"
         " category INTEGER, price REAL, payload BLOB)");
    sqlite3_stmt *insert = prepare("INSERT INTO orders(customer, category, price, payload)"
                                   " VALUES(?1, ?2, ?3, ?4)");
    unsigned char payload[256];
    char customer[40];
    for (int row = 0; row < ROWS; row++) {
        if (row % BATCH == 0) exec("BEGIN");
        unsigned long long r = next();
        int length = 32 + (int)(r % 225);
        for (int i = 0; i < length; i++) payload[i] = (unsigned char)(next() >> 56);
        snprintf(customer, sizeof customer, "customer-%06llu", next() % 100000);
        sqlite3_bind_text(insert, 1, customer, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(insert, 2, (int)((r >> 32) % CATEGORIES));
        sqlite3_bind_double(insert, 3, (double)(r >> 44) / 100.0);
        sqlite3_bind_blob(insert, 4, payload, length, SQLITE_TRANSIENT);
        check(sqlite3_step(insert), "insert");
        sqlite3_reset(insert);
        if (row % BATCH == BATCH - 1) exec("COMMIT");
    }
    sqlite3_finalize(insert);
    exec("CREATE INDEX orders_customer ON orders(customer)");
    printf("inserted %d rows in %d transactions, indexed orders(customer)\n", ROWS, ROWS / BATCH);

    sqlite3_stmt *groups = prepare("SELECT category, count(*), sum(price), avg(length(payload))"
                                   " FROM orders GROUP BY category ORDER BY sum(price) DESC");
    int rows = 0;
    while (sqlite3_step(groups) == SQLITE_ROW)
        if (rows++ == 0)
            printf("GROUP BY category: first %d, %d orders, %.2f total, %.1f-byte payloads\n",
                   sqlite3_column_int(groups, 0), sqlite3_column_int(groups, 1),
                   sqlite3_column_double(groups, 2), sqlite3_column_double(groups, 3));
    sqlite3_finalize(groups);
    printf("GROUP BY category: %d groups\n", rows);

    sqlite3_stmt *busiest = prepare("SELECT customer, count(*) FROM orders"
                                    " GROUP BY customer ORDER BY 2 DESC, 1 LIMIT 1");
    check(sqlite3_step(busiest), "busiest customer");
    printf("busiest customer (through the index): %s, %d orders\n",
           (const char *)sqlite3_column_text(busiest, 0), sqlite3_column_int(busiest, 1));
    sqlite3_finalize(busiest);

    /* ORDER BY an unindexed column: the whole table goes through the sorter; half read. */
    sqlite3_stmt *sorted = prepare("SELECT customer, price, length(payload) FROM orders"
                                   " ORDER BY price");
    for (rows = 0; rows < ROWS / 2 && sqlite3_step(sorted) == SQLITE_ROW; rows++) {
    }
    printf("ORDER BY price: %d of %d rows read, cursor left open at %.2f\n", rows, ROWS,
           sqlite3_column_double(sorted, 1));

    sqlite3_stmt *pages = prepare("SELECT page_count * page_size"
                                  " FROM pragma_page_count, pragma_page_size");
    check(sqlite3_step(pages), "database size");
    int cache, cache_most;
    sqlite3_status(SQLITE_STATUS_PAGECACHE_OVERFLOW, &cache, &cache_most, 0);
    printf("database: %.1f MiB; SQLite's own count: %.1f MiB in use (page cache %.1f MiB),"
           " %.1f MiB at most\n", sqlite3_column_int64(pages, 0) / 1048576.0,
           sqlite3_memory_used() / 1048576.0, cache / 1048576.0,
           sqlite3_memory_highwater(0) / 1048576.0);
    sqlite3_finalize(pages);
    return 0; /* no sqlite3_close: the profile, written at exit, shows what the database holds */
}
