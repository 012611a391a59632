// hfcache.c — ORG/NAME[@REV] -> a snapshot directory of the Hugging Face hub cache
// (hfcache.h). Names from the command line and the ref file's contents are checked before
// they become parts of a path: a repo id or a ref can never climb out of the cache.
#include "hfcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"

#define HF_MAX_PART 96 // huggingface_hub's limit on ORG and NAME
#define HF_MAX_REV  255

// s[0..n) is a repo-id part: letters, digits, '-', '_', '.', not "." or "..", no "--".
static int repo_part(const char *s, size_t n) {
    if (n == 0 || n > HF_MAX_PART || s[0] == '.' || s[0] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if ((i && s[i] == '-' && s[i - 1] == '-') ||
            !(s[i] == '-' || s[i] == '_' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') ||
              (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

// A revision: a branch, tag (may hold '/': refs/pr/1) or commit; no "..", no leading '/'.
static int rev_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > HF_MAX_REV || s[0] == '/' || strstr(s, "..")) return 0;
    for (size_t i = 0; i < n; i++)
        if (!(s[i] == '-' || s[i] == '_' || s[i] == '.' || s[i] == '/' ||
              (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= 'A' && s[i] <= 'Z')))
            return 0;
    return 1;
}

static int is_commit(const char *s) {
    size_t n = strlen(s);
    return n >= 7 && n <= 64 && strspn(s, "0123456789abcdef") == n;
}

// The cache's root, as huggingface_hub picks it.
static int cache_root(char *out, size_t cap) {
    const char *v;
    int n;
    if ((v = getenv("HF_HUB_CACHE")) && *v)
        n = snprintf(out, cap, "%s", v);
    else if ((v = getenv("HUGGINGFACE_HUB_CACHE")) && *v)
        n = snprintf(out, cap, "%s", v);
    else if ((v = getenv("HF_HOME")) && *v)
        n = snprintf(out, cap, "%s/hub", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        n = snprintf(out, cap, "%s/huggingface/hub", v);
    else
        n = snprintf(out, cap, "%s/.cache/huggingface/hub", (v = getenv("HOME")) && *v ? v : "");
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

// The commit refs/REV names (40 hex digits and a newline), into hash.
static int read_ref(const char *path, char *hash, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[128];
    size_t n = fread(line, 1, sizeof line - 1, f); // bytes, not fgets: a NUL is no hash's
    fclose(f);
    line[n] = '\0';
    if (memchr(line, 0, n)) return -1;
    line[strcspn(line, " \r\n")] = '\0';
    if (!is_commit(line) || strlen(line) >= cap) return -1;
    snprintf(hash, cap, "%s", line);
    return 0;
}

// ORG/NAME[@REV] split into its parts; 0 when model is not shaped so.
static int split_repo(const char *model, char *org, char *name, char *rev) {
    const char *slash = strchr(model, '/');
    const char *at = strchr(model, '@');
    size_t end = at ? (size_t)(at - model) : strlen(model);
    if (!slash || (size_t)(slash - model) >= end) return 0;
    size_t no = (size_t)(slash - model), nn = end - no - 1;
    if (!repo_part(model, no) || !repo_part(slash + 1, nn)) return 0;
    memcpy(org, model, no);
    org[no] = '\0';
    memcpy(name, slash + 1, nn);
    name[nn] = '\0';
    snprintf(rev, HF_MAX_REV + 1, "%s", at ? at + 1 : "main");
    return !at || (at[1] && strlen(at + 1) <= HF_MAX_REV && rev_ok(at + 1));
}

int hfcache_resolve(const char *model, char *dir, size_t cap, char *err) {
    char org[HF_MAX_PART + 1], name[HF_MAX_PART + 1], rev[HF_MAX_REV + 1];
    if (kg_is_dir(model) || !split_repo(model, org, name, rev)) {
        if ((size_t)snprintf(dir, cap, "%s", model) >= cap)
            return kg_err(err, KG_EINVAL, "--model: path too long");
        return KG_OK;
    }
    char root[2048], repo[2400], path[2900], hash[HF_MAX_REV + 1];
    if (cache_root(root, sizeof root))
        return kg_err(err, KG_EINVAL, "%s: the Hugging Face cache path is too long", model);
    snprintf(repo, sizeof repo, "%s/models--%s--%s", root, org, name);
    snprintf(path, sizeof path, "%s/refs/%s", repo, rev);
    int found = read_ref(path, hash, sizeof hash) == 0;
    if (!found && is_commit(rev)) { // a commit hash names its snapshot directly
        snprintf(hash, sizeof hash, "%s", rev);
        found = 1;
    }
    if (found) snprintf(path, sizeof path, "%s/snapshots/%s", repo, hash);
    if (!found || !kg_is_dir(path)) { // path: the ref or the snapshot that is not there
        const char *at = strchr(model, '@');
        return kg_err(err, KG_EIO,
                      "%s: not a directory, and not in the Hugging Face cache (looked for %s); "
                      "download it with: huggingface-cli download %s/%s%s%s",
                      model, path, org, name, at ? " --revision " : "", at ? at + 1 : "");
    }
    if ((size_t)snprintf(dir, cap, "%s", path) >= cap)
        return kg_err(err, KG_EINVAL, "%s: the snapshot path is too long", model);
    return KG_OK;
}
