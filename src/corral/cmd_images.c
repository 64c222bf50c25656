/* corral image: the image store, through corrald or (--store) directly.
 *
 *   corral image ls | inspect | rm | tag | gc | import | build-debian | build-vm
 *
 * `corral images` is `corral image ls`.  Imports stream: a file is sent as
 * it is read, a directory (an OCI image layout) as a tar stream made on the
 * fly; with --store DIR nothing talks to corrald and the store library
 * imports straight into DIR (to seed a store, or with no daemon running). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../lib/client/copy.h"
#include "../../lib/image/store.h"
#include "../../lib/util/buf.h"
#include "../../lib/util/cleanup.h"
#include "../../lib/util/fdio.h"
#include "cli.h"

static const char help[] =
    "usage: corral image COMMAND [OPTIONS] [ARGS]\n"
    "\n"
    "  ls [--json]                     list images (also: corral images)\n"
    "  inspect NAME                    an image's layers and config, as JSON\n"
    "  rm NAME...                      remove tags (refused while a sandbox uses it)\n"
    "  tag SOURCE TARGET               give an image another NAME:TAG\n"
    "  gc [--json]                     remove layers no image references\n"
    "  import FILE|DIR|- [--name NAME:TAG] [--ref REF] [--store DIR] [--json]\n"
    "                                  import a docker-archive or oci-archive (maybe\n"
    "                                  gzip, zstd or xz compressed), or an OCI image\n"
    "                                  layout directory; --ref REF (or FILE:REF,\n"
    "                                  DIR:REF) picks one image of several\n"
    "  build-debian NAME [--suite S] [--packages A,B,...] [--mirror URL] [--store DIR]\n"
    "                                  a Debian image made by debootstrap (cached)\n"
    "  build-vm NAME [--suite S] [--packages A,B,...] [--mirror URL] [--store DIR]\n"
    "           [--kernel-manifest FILE]\n"
    "                                  the same with systemd and the guest kernel's\n"
    "                                  modules: an image for the vm backend\n"
    "\n"
    "NAME is NAME[:TAG] (':latest' if none) or an image id (sha256:..., or 12 or\n"
    "more of its hex digits).  With --store DIR, import, build-debian and build-vm\n"
    "write into that store directly, without corrald.\n";

static const char help_ls[] = "usage: corral image ls [--json]\n"
                              "\n"
                              "List the images corrald has, and how many sandboxes use each.\n"
                              "KIND is vm for an image made to boot in the vm backend\n"
                              "(build-vm), else container.\n"
                              "\n"
                              "  --json              print corrald's answer as JSON\n";

static const char help_inspect[] = "usage: corral image inspect NAME\n"
                                   "\n"
                                   "Print an image as JSON: its names, id, kind, layers, size and\n"
                                   "runtime config (env, cwd, user, entrypoint, cmd).\n";

static const char help_rm[] = "usage: corral image rm NAME...\n"
                              "\n"
                              "Remove image tags; an image goes with its last tag (its layers\n"
                              "stay until 'corral image gc').  Refused while a sandbox uses it.\n";

static const char help_tag[] = "usage: corral image tag SOURCE TARGET\n"
                               "\n"
                               "Tag the image SOURCE (a name or id) as TARGET (NAME[:TAG]).\n";

static const char help_gc[] = "usage: corral image gc [--json]\n"
                              "\n"
                              "Remove the layers and configs no image references.\n";

static const char help_import[] =
    "usage: corral image import [--name NAME[:TAG]] [--ref REF] [--store DIR] [--json]\n"
    "                           FILE|DIR|-|FILE:REF|DIR:REF\n"
    "\n"
    "Import an image: a 'docker save' / 'podman save' archive or an oci-archive\n"
    "(either maybe gzip, zstd or xz compressed), or an OCI image layout directory\n"
    "(with oci-layout and index.json); '-' reads an archive from stdin.  Every\n"
    "blob is checked against its digest, and a layer already stored is not\n"
    "stored again.  Prints the image's name.\n"
    "\n"
    "An archive or layout of several images needs REF to pick one: a name it\n"
    "gives the image (a layout's tag as umoci and skopeo write it, e.g. v1;\n"
    "containerd's full name; one of a docker archive's RepoTags, where app:1\n"
    "also matches docker.io/library/app:1) or its digest.  Give it as --ref REF,\n"
    "or as FILE:REF / DIR:REF as skopeo's oci:DIR:REF does: an argument that is\n"
    "not itself a file or directory is split at the first ':' whose left side\n"
    "is one.  With --ref the argument is never split.\n"
    "\n"
    "  --name NAME[:TAG]   tag it so (default: the archive's own full name for\n"
    "                      the image, e.g. its RepoTag; a bare tag such as v1\n"
    "                      is not one)\n"
    "  --ref REF           import the image of the archive that REF names\n"
    "  --store DIR         import into the store DIR directly, without corrald\n"
    "  --json              print the image as JSON\n";

/* ---- helpers ---- */

static int name_arg(const char *cmd, const char *name)
{
    if (!crl_client_image_name_ok(name))
        return crl_cli_usage(cmd, "'%s' is not an image name (NAME[:TAG] or an id)", name);
    return -1;
}

static void argv_text(json_t *arr, struct crl_buf *b)
{
    size_t i;
    json_t *s;
    json_array_foreach(arr, i, s)
        crl_buf_printf(b, "%s%s", b->len ? " " : "", json_string_value(s));
}

static const char *short_id(json_t *img, char *buf, size_t cap)
{
    const char *id = crl_cli_str(img, "id", "-");
    if (strncmp(id, "sha256:", 7) == 0)
        id += 7;
    snprintf(buf, cap, "%.12s", id);
    return buf;
}

static void show_list(json_t *out)
{
    printf("%-28s %-12s %-9s %-10s %-6s %-9s %-6s %s\n", "NAME", "ID", "KIND", "SIZE", "LAYERS",
           "SANDBOXES", "USER", "CMD");
    size_t i;
    json_t *img;
    json_array_foreach(json_object_get(out, "images"), i, img)
    {
        struct crl_buf b;
        char id[16], size[32];
        crl_buf_init(&b, CRL_BUF_UNBOUNDED);
        argv_text(json_object_get(img, "entrypoint"), &b);
        argv_text(json_object_get(img, "cmd"), &b);
        json_t *sz = json_object_get(img, "size");
        printf("%-28s %-12s %-9s %-10s %-6zu %-9lld %-6s %s\n", crl_cli_str(img, "name", "?"),
               short_id(img, id, sizeof(id)), crl_cli_str(img, "kind", "container"),
               sz ? crl_cli_bytes((double)json_integer_value(sz), size, sizeof(size)) : "-",
               json_array_size(json_object_get(img, "layers")),
               json_integer_value(json_object_get(img, "sandboxes")), crl_cli_str(img, "user", "-"),
               b.len ? b.data : "-");
        crl_buf_free(&b);
    }
}

/* Print an imported image: its name, or all of it as JSON. */
static int show_image(json_t *img, bool as_json)
{
    if (as_json) {
        crl_cli_print_json(img);
        return 0;
    }
    const char *name = crl_cli_str(img, "name", NULL);
    json_t *names = json_object_get(img, "names");
    if (!name && json_array_size(names))
        name = json_string_value(json_array_get(names, 0));
    printf("%s\n", name ? name : crl_cli_str(img, "id", "?"));
    return 0;
}

/* ---- ls, inspect, rm, tag, gc ---- */

static int cmd_ls(int argc, char **argv)
{
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, help_ls, 0, NULL, &as_json, NULL);
    return rc >= 0 ? rc : crl_cli_show("/v1/images", as_json, show_list);
}

static int cmd_inspect(int argc, char **argv)
{
    bool as_json;
    const char *name = NULL;
    int rc = crl_cli_read_flags(argc, argv, help_inspect, 1, "an image name", &as_json, &name);
    if (rc >= 0 || (rc = name_arg(argv[0], name)) >= 0)
        return rc;
    char path[300];
    snprintf(path, sizeof(path), "/v1/images/%s", name);
    return crl_cli_show(path, true, NULL);
}

static int cmd_rm(int argc, char **argv)
{
    int rc = crl_cli_no_flags(argc, argv, help_rm);
    if (rc >= 0)
        return rc;
    if (optind == argc)
        return crl_cli_usage(argv[0], "needs at least one image name");
    for (int i = optind; i < argc; i++)
        if ((rc = name_arg(argv[0], argv[i])) >= 0)
            return rc;
    return crl_cli_delete_each("/v1/images", argv + optind, argc - optind);
}

static int cmd_tag(int argc, char **argv)
{
    int rc = crl_cli_no_flags(argc, argv, help_tag);
    if (rc >= 0)
        return rc;
    if (argc - optind != 2)
        return crl_cli_usage(argv[0], "needs SOURCE and TARGET");
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *body = json_pack("{s:s, s:s}", "source", argv[optind], "target", argv[optind + 1]);
    json_auto_t *out = NULL;
    if (!body)
        return crl_cli_usage(argv[0], "image names are UTF-8");
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "POST", "/v1/images/tag", body, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    return show_image(out, false);
}

static int cmd_gc(int argc, char **argv)
{
    bool as_json;
    int rc = crl_cli_read_flags(argc, argv, help_gc, 0, NULL, &as_json, NULL);
    if (rc >= 0)
        return rc;
    struct crl_err err = CRL_ERR_INIT;
    cleanup_client struct crl_client *cl = NULL;
    json_auto_t *out = NULL;
    if (crl_cli_connect(&cl) != 0)
        return CRL_EXIT_FAIL;
    if (crl_client_request(cl, "POST", "/v1/images/gc", NULL, &out, NULL, &err) < 0)
        return crl_cli_fail(&err);
    if (as_json) {
        crl_cli_print_json(out);
        return 0;
    }
    char freed[32];
    printf("removed %lld layers, freed %s\n",
           json_integer_value(json_object_get(out, "layers_removed")),
           crl_cli_bytes((double)json_integer_value(json_object_get(out, "bytes_freed")), freed,
                         sizeof(freed)));
    return 0;
}

/* ---- import ---- */

static int store_import(const char *store_dir, int fd, const char *dir, const char *name,
                        const char *ref, json_t **out, struct crl_err *err)
{
    struct crl_store *s = NULL;
    struct crl_import_limits lim = {0};
    if (crl_store_open(store_dir, true, &s, err) < 0)
        return -1;
    int rc = crl_store_import(s, fd, dir, name, ref, &lim, out, err);
    crl_store_close(s);
    return rc;
}

struct import_dir {
    struct crl_client *c;
    const char *name, *ref;
    json_t **out;
};

static int send_layout(void *ctx, crl_client_source_fn source, void *src_ctx, struct crl_err *err)
{
    struct import_dir *d = ctx;
    return crl_client_image_import(d->c, d->name, d->ref, source, src_ctx, -1, d->out, err);
}

static bool is_layout(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/oci-layout", dir);
    if (access(p, R_OK) < 0)
        return false;
    snprintf(p, sizeof(p), "%s/index.json", dir);
    return access(p, R_OK) == 0;
}

/* `src` as FILE:REF or DIR:REF, when it is no file itself: split at the
 * first ':' whose left side exists (a ref may hold ':' and '/' too, as in
 * "app.tar:docker.io/library/app:1").  `path` gets the left side. */
static bool split_ref(const char *src, char *path, size_t cap, const char **ref)
{
    struct stat st;
    for (const char *c = strchr(src, ':'); c; c = strchr(c + 1, ':')) {
        size_t n = (size_t)(c - src);
        if (n == 0 || n >= cap || !c[1])
            continue;
        memcpy(path, src, n);
        path[n] = 0;
        if (stat(path, &st) == 0) {
            *ref = c + 1;
            return true;
        }
    }
    return false;
}

static int cmd_import(int argc, char **argv)
{
    enum { OPT_NAME = CRL_CLI_OPT_OTHER, OPT_REF, OPT_STORE, OPT_JSON };
    static const struct option opts[] = {{"name", required_argument, 0, OPT_NAME},
                                         {"ref", required_argument, 0, OPT_REF},
                                         {"store", required_argument, 0, OPT_STORE},
                                         {"json", no_argument, 0, OPT_JSON},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *name = NULL, *store = NULL, *ref_opt = NULL;
    bool as_json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_NAME: name = optarg; break;
        case OPT_REF: ref_opt = optarg; break;
        case OPT_STORE: store = optarg; break;
        case OPT_JSON: as_json = true; break;
        case 'h': return crl_cli_help(help_import);
        default: return crl_cli_bad_option(argv[0], argv, c);
        }
    }
    if (argc - optind != 1)
        return crl_cli_usage(argv[0], argc == optind ? "needs a FILE, DIR or '-'"
                                                     : "takes one FILE, DIR or '-'");
    const char *src = argv[optind], *ref = ref_opt;
    struct crl_err err = CRL_ERR_INIT;
    char canon[CRL_IMAGE_NAME_MAX + 1], path[PATH_MAX];
    if (name && crl_store_name_canon(name, canon, &err) < 0)
        return crl_cli_usage(argv[0], "--name: %s", err.msg);
    bool stdin_ = strcmp(src, "-") == 0;
    struct stat st = {0};
    if (!stdin_ && stat(src, &st) < 0) {
        int e = errno;
        if (ref_opt || (e != ENOENT && e != ENOTDIR) || !split_ref(src, path, sizeof(path), &ref))
            return crl_cli_failf("%s: %s%s", src, strerror(e),
                                 !ref_opt && strchr(src, ':')
                                     ? " (nor is its part before a ':' a file or directory, "
                                       "for FILE:REF)"
                                     : "");
        src = path;
        if (stat(src, &st) < 0)
            return crl_cli_failf("%s: %s", src, strerror(errno));
    }
    if (ref && crl_store_ref_check(ref, &err) < 0)
        return crl_cli_usage(argv[0], "%s: %s", ref_opt ? "--ref" : "the REF of FILE:REF", err.msg);
    bool dir = S_ISDIR(st.st_mode);
    if (dir && !is_layout(src))
        return crl_cli_failf("%s is a directory but not an OCI image layout (it needs oci-layout "
                             "and index.json)",
                             src);
    if (!stdin_ && !dir && !S_ISREG(st.st_mode))
        return crl_cli_failf("%s is not a file or directory", src);
    cleanup_close int fd = -1;
    if (!stdin_ && !dir && (fd = crl_openat(AT_FDCWD, src, O_RDONLY, 0)) < 0)
        return crl_cli_failf("%s: %s", src, strerror(errno));
    json_auto_t *out = NULL;
    int rc;
    if (store) {
        rc = store_import(store,
                          dir      ? -1
                          : stdin_ ? STDIN_FILENO
                                   : fd,
                          dir ? src : NULL, name, ref, &out, &err);
    } else {
        cleanup_client struct crl_client *cl = NULL;
        if (crl_cli_connect(&cl) != 0)
            return CRL_EXIT_FAIL;
        /* Ctrl-C stops the upload: corrald sees a truncated archive and
         * its importer stores nothing. */
        crl_cli_catch_signals(cl);
        if (dir) {
            struct import_dir d = {cl, name, ref, &out};
            rc = crl_copy_dir_stream(src, send_layout, &d, &err);
        } else {
            rc = crl_client_image_import_fd(cl, name, ref, stdin_ ? STDIN_FILENO : fd,
                                            stdin_ ? -1 : (long long)st.st_size, &out, &err);
        }
        if (rc < 0 && crl_cli_interrupted)
            return 128 + crl_cli_interrupted;
    }
    if (rc < 0) {
        crl_err_prefix(&err, "importing %s", stdin_ ? "stdin" : src);
        return crl_cli_fail(&err);
    }
    return show_image(out, as_json);
}

/* ---- dispatch ---- */

static int cmd_build_debian(int argc, char **argv)
{
    return crl_cmd_image_build_debian(argc, argv, CRL_DEBIAN_CONTAINER);
}

static int cmd_build_vm(int argc, char **argv)
{
    return crl_cmd_image_build_debian(argc, argv, CRL_DEBIAN_VM);
}

static const struct crl_cli_sub subs[] = {
    {"ls", cmd_ls},
    {"list", cmd_ls},
    {"inspect", cmd_inspect},
    {"rm", cmd_rm},
    {"tag", cmd_tag},
    {"gc", cmd_gc},
    {"import", cmd_import},
    {"build-debian", cmd_build_debian},
    {"build-vm", cmd_build_vm},
};

int crl_cmd_image(int argc, char **argv)
{
    return crl_cli_dispatch(argc, argv, "image", subs, CRL_ARRAY_SIZE(subs),
                            "ls, inspect, rm, tag, gc, import, build-debian, build-vm", help);
}

int crl_cmd_images(int argc, char **argv)
{
    return cmd_ls(argc, argv);
}
