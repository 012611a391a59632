// test_base_grow.c — base/kg.h's kg_grow / KG_GROW, the one growth of a typed array: the
// elements are kept across moves, n appends cost O(log n) reallocations and at most 2n
// elements of room, a need that would overflow size_t is refused with the array untouched.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kg.h"
#include "check.h"

typedef struct {
    double x;
    int id;
} Item; // 16 bytes with padding: elem is not 1

// 100,000 one-at-a-time appends, as every caller does them.
static void test_appends(void) {
    Item *a = NULL;
    size_t n = 0, cap = 0, grows = 0;
    for (int i = 0; i < 100000; i++) {
        size_t before = cap;
        REQUIRE(KG_GROW(a, &cap, n + 1, NULL) == KG_OK, "append %d", i);
        CHECK(cap >= n + 1);
        grows += cap != before;
        a[n++] = (Item){.x = i * 0.5, .id = i};
    }
    // doubling from 16: 16 * 2^13 = 131072 >= 100000, so 14 capacities in all
    CHECK_MSG(grows == 14, "%zu reallocations for 100000 appends", grows);
    CHECK_MSG(cap == 131072 && cap < 2 * n, "cap %zu for n %zu", cap, n);
    int kept = 1;
    for (size_t i = 0; i < n; i++)
        kept &= a[i].id == (int)i && a[i].x == (double)i * 0.5;
    CHECK(kept);
    free(a);
}

// A need past the capacity in one step, then needs already met (nothing moves).
static void test_jumps(void) {
    int *a = NULL;
    size_t cap = 0;
    CHECK(KG_GROW(a, &cap, 0, NULL) == KG_OK && a == NULL && cap == 0); // nothing needed
    CHECK(KG_GROW(a, &cap, 1000, NULL) == KG_OK && cap == 1024 && a);
    for (int i = 0; i < 1000; i++)
        a[i] = i * 7;
    int *p = a;
    CHECK(KG_GROW(a, &cap, 1024, NULL) == KG_OK && a == p && cap == 1024);
    CHECK(KG_GROW(a, &cap, 5, NULL) == KG_OK && a == p && cap == 1024);
    CHECK(KG_GROW(a, &cap, 5000, NULL) == KG_OK && cap == 8192);
    int kept = 1;
    for (int i = 0; i < 1000; i++)
        kept &= a[i] == i * 7;
    CHECK(kept);
    free(a);
}

// need * elem past SIZE_MAX: refused before any allocation, the array and cap as they were.
static void test_overflow(void) {
    Item *a = NULL;
    size_t cap = 0;
    REQUIRE(KG_GROW(a, &cap, 3, NULL) == KG_OK, "a first element");
    a[0] = (Item){.x = 1.5, .id = 42};
    Item *p = a;
    char err[KG_ERRLEN] = "";
    CHECK(KG_GROW(a, &cap, SIZE_MAX / sizeof *a + 1, err) == KG_ENOMEM);
    CHECK(a == p && cap == 16 && a[0].id == 42 && a[0].x == 1.5);
    CHECK_MSG(strstr(err, "out of memory") != NULL, "err: %s", err);
    CHECK(KG_GROW(a, &cap, SIZE_MAX, NULL) == KG_ENOMEM && a == p && cap == 16);
    free(a);
}

int main(void) {
    test_appends();
    test_jumps();
    test_overflow();
    return check_report();
}
