/* One host running corrald: its sandboxes, capacity and admission control,
 * images, cgroups, network namespaces and the backends it serves.  The API
 * layer is a thin front end over these functions.
 *
 * The host sits above sandbox.c (the dependency order is drawn in
 * sandbox.h) and knows nothing of exec or sessions.  The backends are
 * registered through the configuration, so a test can run the host over a
 * fake one (tests/unit/test_host.c). */
#ifndef CRL_CORE_HOST_H
#define CRL_CORE_HOST_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../os/cgroup.h"
#include "image.h"
#include "../util/loop.h"
#include "../os/netns.h"
#include "../os/vnet.h"
#include "sandbox.h"

struct crl_resolver;
struct crl_netlog;
struct crl_worker;

/* How a create is admitted.  measured: while the host's available memory
 * (MemAvailable, less what creates admitted since it was read are expected
 * to take) stays above the reserve; limits are the kernel's to enforce, and
 * CPU limits are quotas that reserve nothing.  reserved: the sum of the
 * sandboxes' memory limits stays within the host's memory less the reserve
 * times --overcommit, and their CPU limits within CPUs x --cpu-overcommit. */
enum crl_admission { CRL_ADMIT_MEASURED = 0, CRL_ADMIT_RESERVED };

/* reserve_mb's default: 512 MiB or a twentieth of the host's memory,
 * whichever is more. */
#define CRL_HOST_RESERVE_AUTO UINT32_MAX

struct crl_host_config {
    const char *state_dir;
    /* The backends this host serves (borrowed: they outlive the host); a
     * spec naming another one is refused with CRL_E_UNSUPPORTED. */
    const struct crl_backend_ops *const *backends;
    size_t n_backends;
    /* Serve no images: open no image store, and make sandboxes without
     * one (sb->image NULL: exec and sessions refuse to run in them).  For
     * backends that need none, such as the unit tests' fake; the API's
     * image endpoints need a store. */
    bool no_images;
    const char *images_dir; /* the writable image store; NULL: <state_dir>/images */
    const char *volume_dir; /* named volumes; NULL: <state_dir>/volumes */
    /* A directory the cluster's hosts share (--shared-dir), or NULL: the
     * records of live sandboxes go in <shared_dir>/hosts/<host_id>, where
     * the others read them once this host is lost (records.h). */
    const char *shared_dir;
    struct crl_import_limits image_limits; /* for imports; 0: the store's defaults */
    const char *const *images_from;
    size_t n_images_from;
    const char *busybox_bin;
    char host_id[16];
    /* admission control (docs/architecture.md, "Admission") */
    enum crl_admission admission;
    unsigned max_sandboxes;
    double overcommit;     /* reserved: sandbox memory may reach capacity x this */
    double cpu_overcommit; /* reserved: CPU limits may add up to CPUs x this */
    unsigned reserve_mb;   /* memory kept for the host itself; CRL_HOST_RESERVE_AUTO */
    unsigned retry_after_s;
    const char *meminfo_path; /* NULL: /proc/meminfo (the unit tests give a file) */
    /* isolation */
    enum crl_cgroup_version cgroup_version;
    const char *cgroup_root;
    bool cgroup_no_limits; /* v2 without memory/pids controllers: run unlimited (tests) */
    const char *cgroup_parent;
    /* Where the lock on cgroup_parent lives (/run/corral): the same
     * for every corrald of a machine, so two cannot share a parent. */
    const char *lock_dir;
    uint32_t uid_base;  /* sandbox slot i maps ids 0..65535 to uid_base + i*65536 */
    uint32_t uid_slots; /* how many slots (bounds concurrent sandboxes too) */
    const char *spawner_path;
    unsigned spawners;
    unsigned netns_pool;
    /* Sandboxes with a network get a /30 each of this IPv4 range, behind
     * nftables rules of this daemon's (lib/os/vnet.h), made at the first. */
    const char *network_range;
    uint16_t resolver_port; /* where the sandboxes' resolver listens (DNS is redirected there) */
    uint16_t service_port;  /* where corrald answers their services (lib/api/services.c) */
    unsigned network_max_conns; /* connections a sandbox may have open at once (0: 1024) */
    /* The resolvers sandboxes of mode full are given (space-separated
     * IPv4 addresses); NULL: the host's /etc/resolv.conf's. */
    const char *dns_upstream;
    unsigned function_pool; /* keepers made ahead per function runtime */
    /* The microvm backend: its guests' kernel and initramfs (NULL:
     * <state>/microvm/), "auto", "kvm" or "tcg" (NULL: auto), QEMU. */
    const char *microvm_kernel, *microvm_initrd, *microvm_accel, *qemu_path;
    bool microvm_cold; /* no templates: every guest boots */
    /* Where saved templates are kept for the next corrald (NULL:
     * <state>/templates; "": nowhere). */
    const char *template_cache;
    /* bookkeeping */
    double tombstone_s;
    unsigned max_tombstones; /* the oldest ended sandbox is forgotten beyond this */
};

#define CRL_HOST_BUCKETS 8192

struct crl_host {
    struct crl_host_config cfg;
    char state_dir[4096];
    char run_dir[4096];
    struct crl_loop *loop;
    struct crl_image_store *images;
    struct crl_volumes *volumes;
    struct crl_cgroup_mgr *cgroups;
    struct crl_netns_pool *netns;
    struct crl_vnet *vnet;  /* NULL until a sandbox has a network */
    char *peers;            /* the cluster's other hosts: no sandbox reaches them */
    json_t *lost;           /* the previous run's sandboxes, by id (records.h) */
    int records_fd;         /* records.log, appended to */
    char records_dir[4200]; /* where it is: <state>, or <shared>/hosts/<id> */
    char boot_id[40];       /* this boot's (crl_boot_id): in each record, for adoption */
    size_t records_bytes;
    struct crl_resolver *resolver; /* with vnet */
    struct crl_netlog *netlog;     /* with vnet: what sandboxes were refused */
    struct crl_worker *net_worker; /* with vnet: sandboxes' links are made there */
    char nameservers[256];         /* cfg.dns_upstream, or the host's */
    struct crl_sandbox *sandboxes; /* every known sandbox, live or tombstoned */
    struct crl_pool *pools;        /* warm pools (pool.c) */
    size_t n_sandboxes;
    struct crl_sandbox **by_id;                /* CRL_HOST_BUCKETS chains */
    struct crl_sandbox *tomb_head, *tomb_tail; /* ended sandboxes kept for accounting */
    unsigned n_tombs;
    unsigned char *slots; /* 1 = in use */
    /* capacity and what is reserved now */
    uint64_t mem_total_mb;
    unsigned ncpus;
    uint64_t reserve_mb; /* cfg.reserve_mb, CRL_HOST_RESERVE_AUTO worked out */
    uint64_t reserved_mb;
    double reserved_cpus;
    unsigned live;
    unsigned releasing; /* stopped (destroyed, as their users see them), resources still held */
    /* measured admission: MemAvailable when last read (mem_read_ns), and
     * what creates admitted since are expected to take */
    uint64_t mem_avail_mb, mem_since_mb;
    unsigned long long mem_read_ns;
    /* descriptors: corrald's RLIMIT_NOFILE, and what live sandboxes hold */
    uint64_t nofile;
    uint64_t fds_held;
    struct crl_sb_counters counters;
    struct crl_sb_owner owner; /* what its sandboxes see of it */
    void **backend_state;      /* each registered backend's, in cfg.backends' order */
    bool shutting_down;
    bool handover; /* its close leaves what it can running, for the next corrald */
    double started_at;
    int lock_fd, cgroup_lock_fd; /* flocks held for our lifetime */
};

void crl_host_config_defaults(struct crl_host_config *c);
/* Open the state dir (locked against a second corrald), reconcile leftovers
 * of a previous run, start the backends. */
int crl_host_open(const struct crl_host_config *cfg, struct crl_loop *loop, struct crl_host **out,
                  struct crl_err *err);
/* Destroy every sandbox and release everything (clean shutdown); with
 * h->handover set, a sandbox the next corrald can adopt runs on instead
 * (its commands end: their stdio is this corrald's), with its record, its
 * cgroup and its PID 1. */
void crl_host_close(struct crl_host *h);

/* Create a sandbox from a validated spec (ownership of *spec moves in).
 * cb runs once it is ready or has failed; on failure nothing of it remains. */
int crl_host_create(struct crl_host *h, struct crl_spec *spec, crl_sandbox_cb cb, void *ctx,
                    struct crl_err *err);
struct crl_sandbox *crl_host_find(struct crl_host *h, const char *id, struct crl_err *err);
/* What a create of spec needs of this host: its backend, its image, its
 * services' targets (a pool's template is checked so when it is set). */
int crl_host_check_spec(struct crl_host *h, const struct crl_spec *spec, struct crl_err *err);
/* For lib/core/pool.c: a create for `pool`, admitted only with room to
 * spare for explicit creates, hidden from the API until claimed. */
int crl_host_create_pooled(struct crl_host *h, struct crl_spec *spec, struct crl_pool *pool,
                           crl_sandbox_cb cb, void *ctx, struct crl_err *err);
/* Destroy (idempotent); cb runs once it is gone: crl_sandbox_destroy(). */
int crl_host_destroy(struct crl_host *h, struct crl_sandbox *sb, const char *reason,
                     crl_sandbox_cb cb, void *ctx, struct crl_err *err);
/* Every sandbox but pools' (the API filters and pages them: crl_req_list). */
json_t *crl_host_list_json(struct crl_host *h);
json_t *crl_host_info_json(struct crl_host *h);
/* Prometheus text exposition. */
char *crl_host_metrics(struct crl_host *h);

/* The sandboxes' network: made at the first call (its table and the
 * host's forwarding are set up only once a sandbox needs them). */
struct crl_vnet *crl_host_vnet(struct crl_host *h, struct crl_err *err);
/* The cluster's other hosts' IPv4 addresses ("a, b"): no sandbox of this
 * host reaches them, whatever its network policy. */
void crl_host_set_peers(struct crl_host *h, const char *addrs);

/* Allocation of a sandbox id: "sb-<host id>-<random>". */
void crl_host_new_id(struct crl_host *h, char *out, size_t cap);

#endif
