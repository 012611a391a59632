// dlib.c — opening a shared library from beside the program (dlib.h).
#include "base/dlib.h"

#include <dlfcn.h>
#include <limits.h>
#include <string.h>

#include "base/kg.h"

void *kg_dlib_open(const char *name, char *path, size_t cap, char *err) {
    char dir[PATH_MAX];
    if (cap) path[0] = '\0';
    int rc = kg_exe_dir(dir, sizeof dir, err);
    if (rc) return NULL;
    if (kg_path_join(path, cap, dir, name)) {
        kg_err(err, KG_EIO, "%s/%s: the path is longer than %zu bytes", dir, name, cap);
        return NULL;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        why = why ? why : "unknown error";
        // the linker names the file when the library itself is at fault ("PATH: invalid ELF
        // header"), and only the dependency when one is missing ("libcublas.so.13: cannot
        // open shared object file"): the path leads either way
        if (strncmp(why, path, strlen(path)))
            kg_err(err, KG_EIO, "%s: %s", path, why);
        else
            kg_err(err, KG_EIO, "%s", why);
    }
    return h;
}

void *kg_dlib_symbol(void *h, const char *path, const char *sym, char *err) {
    void *p = dlsym(h, sym);
    if (!p) kg_err(err, KG_EIO, "%s has no symbol %s", path, sym);
    return p;
}
