/*
 * pimbuild marker runtime: region_enter(id) / region_exit(id) around every candidate nest.
 *
 * Timing mode (always): per region, invocations and accumulated CLOCK_MONOTONIC nanoseconds.
 * Counter mode (PIM_WITH_PAPI, after pim_papi_start): one PAPI event set, started once, read at
 * entry and exit; the differences are accumulated per region and event. No multiplexing.
 * Callgrind mode (PIM_WITH_CALLGRIND; valgrind runs with --collect-atstart=no): collection is
 * switched on at a region's entry and off at its exit, so only the regions' own costs are
 * counted; they are dumped as "region <id>" when another region starts and at
 * pim_callgrind_flush (after each forward), so consecutive invocations of one region (a nest
 * inside a loop: 262144 for a column reduction) make one profile part, not one each.
 *
 * The host program reads the accumulators through pim_counts / pim_ns / pim_values and clears
 * them with pim_reset. Built by pimbuild's runtime task with the system C compiler.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef PIM_WITH_PAPI
#include <papi.h>
#endif
#ifdef PIM_WITH_CALLGRIND
#include <valgrind/callgrind.h>
#endif

#define PIM_MAX_REGIONS 8192
#define PIM_FORWARD_REGION (PIM_MAX_REGIONS - 1) /* the whole forward, around the nests' */
#define PIM_MAX_EVENTS 8

static uint64_t counts[PIM_MAX_REGIONS];
static uint64_t ns[PIM_MAX_REGIONS];
static uint64_t started_ns[PIM_MAX_REGIONS];
static long long values[PIM_MAX_REGIONS * PIM_MAX_EVENTS];
static long long entry_values[PIM_MAX_EVENTS];
static int n_events = 0;

#ifdef PIM_WITH_PAPI
static int event_set = PAPI_NULL;
#endif

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int valid(int64_t id) { return id >= 0 && id < PIM_MAX_REGIONS; }

#ifdef PIM_WITH_CALLGRIND
static int64_t collecting = -1; /* the region whose costs are counted and not yet dumped */
#endif

/* Dump the costs counted since the last dump as the region's ("region <id>"). */
void pim_callgrind_flush(void) {
#ifdef PIM_WITH_CALLGRIND
    if (collecting < 0) return;
    char name[32];
    snprintf(name, sizeof name, "region %lld", (long long)collecting);
    CALLGRIND_DUMP_STATS_AT(name);
    collecting = -1;
#endif
}

void region_enter(int64_t id) {
    if (!valid(id)) return;
#ifdef PIM_WITH_PAPI
    if (n_events > 0) PAPI_read(event_set, entry_values);
#endif
    started_ns[id] = now_ns();
#ifdef PIM_WITH_CALLGRIND /* last: the marker's own work is not the nest's */
    if (id != PIM_FORWARD_REGION) { /* the nests' regions only: they do not nest */
        if (id != collecting) {
            pim_callgrind_flush();
            CALLGRIND_ZERO_STATS;
            collecting = id;
        }
        CALLGRIND_TOGGLE_COLLECT; /* on */
    }
#endif
}

void region_exit(int64_t id) {
#ifdef PIM_WITH_CALLGRIND /* first: the marker's own work is not the nest's */
    if (valid(id) && id != PIM_FORWARD_REGION) CALLGRIND_TOGGLE_COLLECT; /* off */
#endif
    uint64_t end = now_ns();
    if (!valid(id)) return;
    counts[id] += 1;
    ns[id] += end - started_ns[id];
#ifdef PIM_WITH_PAPI
    if (n_events > 0) {
        long long exit_values[PIM_MAX_EVENTS];
        PAPI_read(event_set, exit_values);
        for (int e = 0; e < n_events; e++)
            values[id * PIM_MAX_EVENTS + e] += exit_values[e] - entry_values[e];
    }
#endif
}

/* Offload boundaries of the hybrid program: each call is one host<->PIM transition. */
static uint64_t transitions = 0;
static int64_t open_segment = -1;

void pim_offload_begin(int64_t segment) {
    transitions += 1;
    open_segment = segment;
}

void pim_offload_end(int64_t segment) {
    if (segment == open_segment) open_segment = -1;
    transitions += 1;
}

uint64_t pim_transitions(void) { return transitions; }

int pim_max_regions(void) { return PIM_MAX_REGIONS; }
int pim_max_events(void) { return PIM_MAX_EVENTS; }
const uint64_t *pim_counts(void) { return counts; }
const uint64_t *pim_ns(void) { return ns; }
const long long *pim_values(void) { return values; }

void pim_reset(void) {
    transitions = 0;
    memset(counts, 0, sizeof counts);
    memset(ns, 0, sizeof ns);
    memset(values, 0, sizeof values);
}

/* Start one event set with the given events (names separated by ','). Returns the number of
 * events, or -1 with PAPI's reason in err. */
int pim_papi_start(const char *events, char *err, int errlen) {
#ifdef PIM_WITH_PAPI
    int rc;
    if (PAPI_is_initialized() == PAPI_NOT_INITED) {
        rc = PAPI_library_init(PAPI_VER_CURRENT);
        if (rc != PAPI_VER_CURRENT) {
            snprintf(err, errlen, "PAPI_library_init: %s", PAPI_strerror(rc));
            return -1;
        }
    }
    if (event_set != PAPI_NULL) {
        PAPI_cleanup_eventset(event_set);
        PAPI_destroy_eventset(&event_set);
        event_set = PAPI_NULL;
    }
    if ((rc = PAPI_create_eventset(&event_set)) != PAPI_OK) {
        snprintf(err, errlen, "PAPI_create_eventset: %s", PAPI_strerror(rc));
        return -1;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", events);
    int n = 0;
    for (char *name = strtok(buf, ","); name; name = strtok(NULL, ",")) {
        if (n == PIM_MAX_EVENTS) {
            snprintf(err, errlen, "more than %d events", PIM_MAX_EVENTS);
            return -1;
        }
        if ((rc = PAPI_add_named_event(event_set, name)) != PAPI_OK) {
            snprintf(err, errlen, "cannot add event %s: %s", name, PAPI_strerror(rc));
            PAPI_cleanup_eventset(event_set);
            PAPI_destroy_eventset(&event_set);
            event_set = PAPI_NULL;
            return -1;
        }
        n++;
    }
    if ((rc = PAPI_start(event_set)) != PAPI_OK) {
        snprintf(err, errlen, "PAPI_start: %s", PAPI_strerror(rc));
        return -1;
    }
    n_events = n;
    return n;
#else
    snprintf(err, errlen, "this marker runtime was built without PAPI (no papi.h)");
    (void)events;
    return -1;
#endif
}

void pim_papi_stop(void) {
#ifdef PIM_WITH_PAPI
    if (n_events > 0) {
        long long discard[PIM_MAX_EVENTS];
        PAPI_stop(event_set, discard);
    }
    n_events = 0;
#endif
}

/* Why PAPI's perf_event component is disabled ("" when it is enabled or PAPI is absent). */
const char *pim_papi_perf_event_status(void) {
#ifdef PIM_WITH_PAPI
    if (PAPI_is_initialized() == PAPI_NOT_INITED)
        PAPI_library_init(PAPI_VER_CURRENT);
    int cidx = PAPI_get_component_index("perf_event");
    if (cidx < 0) return "no perf_event component";
    const PAPI_component_info_t *info = PAPI_get_component_info(cidx);
    return info && info->disabled ? info->disabled_reason : "";
#else
    return "built without PAPI";
#endif
}
