/* libFuzzer driver for lib/image: crl_store_import() on arbitrary bytes, as
 * a docker-archive or oci-archive (maybe compressed) read from a memfd, into
 * one store opened once in a mkdtemp(3) directory.  An input refused
 * without a ref (an archive of several images is) is imported again with
 * the ref "v2" and a name, so the choice of one image by ref is fuzzed
 * too.  Beyond "no crash, no leak, no UB" it checks the contract of
 * store.h, after each import:
 *   - a refusal is CRL_E_INVALID or CRL_E_TOO_LARGE (CRL_E_UNSUPPORTED for
 *     a format it does not read; CRL_E_INTERNAL only with the errno of a
 *     failed syscall) with a message, and leaves nothing behind: no tag, no
 *     image record, no layer, no tmp/ entry;
 *   - an accepted image has an id and layers whose EROFS files exist, and
 *     is found by its id; once untagged, the collector removes every layer
 *     and tmp/ is empty.
 * The limits are tight (4 MiB a layer, 16 MiB in all, 4096 entries) so a
 * decompression bomb costs milliseconds.  Each accepted layer runs
 * mkfs.erofs ($CORRAL_MKFS_EROFS or on PATH), so valid inputs are slow.
 *
 *   tests/fuzz/run.sh builds it; corpus: tests/fuzz/corpus/image (made by
 *   tests/fuzz/make_image_corpus.py), dictionary: tests/fuzz/image.dict */
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/image/store.h"
#include "../../lib/util/fdio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "fuzz_image: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

static char store_dir[4096];
static struct crl_store *store;
static bool verbose; /* $FUZZ_IMAGE_VERBOSE: say what became of each input */

static const struct crl_import_limits limits = {
    .max_layer_bytes = 4u << 20,
    .max_total_bytes = 16u << 20,
    .max_entries = 4096,
};

static void remove_store(void)
{
    crl_store_close(store);
    store = NULL;
    crl_rm_rf_at(AT_FDCWD, store_dir);
}

static void open_store(void)
{
    struct crl_err e = CRL_ERR_INIT;
    const char *tmp = getenv("TMPDIR");
    snprintf(store_dir, sizeof(store_dir), "%s/corral-fuzz-image.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(store_dir) || crl_store_open(store_dir, true, &store, &e) < 0) {
        fprintf(stderr, "fuzz_image: cannot open a store in %s: %s\n", store_dir,
                e.msg[0] ? e.msg : strerror(errno));
        abort();
    }
    atexit(remove_store);
    verbose = getenv("FUZZ_IMAGE_VERBOSE") != NULL;
}

/* Entries of <store>/<sub>, "." and ".." aside (0 when it does not exist). */
static size_t count_entries(const char *sub)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", store_dir, sub);
    DIR *d = opendir(path);
    if (!d) {
        CHECK(errno == ENOENT);
        return 0;
    }
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static void check_empty(void)
{
    char **tags = NULL;
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_store_tags(store, &tags, &e) == 0);
    CHECK(tags == NULL || tags[0] == NULL);
    free(tags);
    CHECK(count_entries("images") == 0);
    CHECK(count_entries("tmp") == 0);
}

static void check_refusal(const struct crl_err *e)
{
    CHECK(e->code == CRL_E_INVALID || e->code == CRL_E_TOO_LARGE || e->code == CRL_E_UNSUPPORTED ||
          (e->code == CRL_E_INTERNAL && e->sys_errno != 0));
    CHECK(e->msg[0] != 0);
    CHECK(memchr(e->msg, 0, sizeof(e->msg)) != NULL);
    if (e->code == CRL_E_INTERNAL)
        fprintf(stderr, "fuzz_image: internal error (errno %d): %s\n", e->sys_errno, e->msg);
}

/* An accepted image: its JSON holds what store.h promises, it is found by
 * id, and its layers exist; then every tag goes. */
static void check_accepted(json_t *img)
{
    CHECK(json_is_object(img));
    const char *id = json_string_value(json_object_get(img, "id"));
    CHECK(id && strncmp(id, "sha256:", 7) == 0 && strlen(id) == CRL_DIGEST_LEN);
    json_t *layers = json_object_get(img, "layers");
    CHECK(json_is_array(layers) && json_array_size(layers) <= CRL_IMAGE_MAX_LAYERS);

    struct crl_err e = CRL_ERR_INIT;
    struct crl_store_image *rec = NULL;
    CHECK(crl_store_lookup(store, id, &rec, &e) == 0);
    CHECK(strcmp(rec->id, id) == 0 && rec->n_layers == json_array_size(layers));
    for (size_t i = 0; i < rec->n_layers; i++) {
        char path[4096];
        struct stat st;
        CHECK(crl_store_layer_path(store, rec->layers[i].digest, path, sizeof(path)) == 0);
        CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode));
        CHECK((uint64_t)st.st_size == rec->layers[i].size);
    }
    crl_store_image_free(rec);

    char **tags = NULL;
    CHECK(crl_store_tags(store, &tags, &e) == 0);
    for (char **t = tags; t && *t; t++) {
        CHECK(crl_store_untag(store, *t, &e) == 0);
        free(*t);
    }
    free(tags);
}

/* Import the archive in `fd` and check what became of it; false when it
 * was refused. */
static bool import_checked(int fd, size_t size, const char *name, const char *ref)
{
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    json_t *img = NULL;
    struct crl_err e = CRL_ERR_INIT;
    int r = crl_store_import(store, fd, NULL, name, ref, &limits, &img, &e);
    if (verbose)
        fprintf(stderr, "fuzz_image: %zu bytes%s%s: %s\n", size, ref ? ", ref " : "",
                ref ? ref : "", r < 0 ? e.msg : "imported");
    if (r < 0) {
        check_refusal(&e);
        CHECK(img == NULL);
        check_empty();
        CHECK(count_entries("layers") == 0);
        return false;
    }
    check_accepted(img);
    json_decref(img);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!store)
        open_store();
    int fd = memfd_create("fuzz_image", MFD_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(crl_write_full(fd, data, size) == 0);
    if (!import_checked(fd, size, NULL, NULL))
        import_checked(fd, size, "fuzz/picked:v2", "v2");
    close(fd);

    uint64_t removed = 0, freed = 0;
    struct crl_err e = CRL_ERR_INIT;
    CHECK(crl_store_gc(store, &removed, &freed, &e) == 0);
    check_empty();
    CHECK(count_entries("layers") == 0);
    return 0;
}
