/* corral-import: import one image archive, read from stdin, into a store,
 * or pull one from another host of the cluster (--pull, pull.c).
 *
 * corrald runs it for POST /v1/images, and for a create whose image this
 * host lacks, so that parsing what a client or another host sent (and
 * running mkfs.erofs) happens outside the daemon; it is a thin front end
 * over crl_store_import() and crl_store_pull().  It prints one JSON object on stdout: the
 * image, or {"error": {"code", "message"}} with exit status 1 (2 for a
 * usage error).  Diagnostics go to stderr, which corrald logs. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/image/store.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/err.h"
#include "../../lib/util/log.h"
#include "pull.h"

static const char usage[] =
    "usage: corral-import --store DIR [--name NAME[:TAG]] [--ref REF] [--max-layer-bytes N]\n"
    "                     [--max-total-bytes N] < ARCHIVE\n"
    "       corral-import --store DIR --pull NAME[:TAG] [--max-...] < HOSTS\n"
    "Import a docker-archive or oci-archive (maybe gzip, zstd or xz compressed)\n"
    "from stdin into the image store DIR; print the image as JSON.  --ref picks\n"
    "one image of several by a name the archive gives it (a tag, a RepoTag).\n"
    "--pull copies the image NAME from the first host that has it, of those\n"
    "named on stdin as {\"token\": T, \"hosts\": [{\"id\": ID, \"addr\": URL}]}.\n";

static int fail(const struct crl_err *err)
{
    /* A message quoting an archive's entry name may not be UTF-8: JSON is */
    char msg[sizeof(err->msg)];
    snprintf(msg, sizeof(msg), "%s", err->msg);
    crl_utf8_sanitize(msg);
    json_t *j =
        json_pack("{s:{s:s, s:s}}", "error", "code", crl_errc_name(err->code), "message", msg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s)
        printf("%s\n", s);
    else
        printf("{\"error\":{\"code\":\"%s\",\"message\":\"the import failed\"}}\n",
               crl_errc_name(err->code));
    fprintf(stderr, "corral-import: %s\n", msg);
    fflush(stdout); /* the answer is out, whatever happens at exit */
    free(s);
    json_decref(j);
    return 1;
}

static int parse_bytes(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || s[0] == '-') {
        fprintf(stderr, "corral-import: %s needs a number of bytes, not '%s'\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"store", required_argument, 0, 's'},
                                         {"name", required_argument, 0, 'n'},
                                         {"ref", required_argument, 0, 'r'},
                                         {"pull", required_argument, 0, 'p'},
                                         {"max-layer-bytes", required_argument, 0, 'L'},
                                         {"max-total-bytes", required_argument, 0, 'T'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *dir = NULL, *name = NULL, *ref = NULL, *pull = NULL;
    struct crl_import_limits lim = {0};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': dir = optarg; break;
        case 'n': name = optarg; break;
        case 'r': ref = optarg; break;
        case 'p': pull = optarg; break;
        case 'L':
            if (parse_bytes("--max-layer-bytes", optarg, &lim.max_layer_bytes) < 0)
                return 2;
            break;
        case 'T':
            if (parse_bytes("--max-total-bytes", optarg, &lim.max_total_bytes) < 0)
                return 2;
            break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (!dir || optind != argc || (pull && (name || ref))) {
        fputs(usage, stderr);
        return 2;
    }
    crl_log_setup(CRL_LOG_INFO, CRL_LOG_TEXT, "corral-import");
    struct crl_err err = CRL_ERR_INIT;
    struct crl_store *store = NULL;
    json_t *out = NULL;
    if (crl_store_open(dir, true, &store, &err) < 0)
        return fail(&err);
    int rc = pull ? crl_import_pull(store, pull, &lim, &out, &err)
                  : crl_store_import(store, 0, NULL, name, ref, &lim, &out, &err);
    if (pull)
        name = pull;
    crl_store_close(store);
    if (rc < 0)
        return fail(&err);
    /* corrald answers with its own view of the image, found by this name */
    if (name && !json_object_get(out, "name")) {
        char canon[CRL_IMAGE_NAME_MAX + 1];
        if (crl_store_name_canon(name, canon, &err) == 0)
            json_object_set_new(out, "name", json_string(canon));
    }
    char *s = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!s) {
        crl_err_set(&err, CRL_E_INTERNAL, "encoding the image as JSON");
        return fail(&err);
    }
    printf("%s\n", s);
    free(s);
    return fflush(stdout) == 0 ? 0 : 1;
}
