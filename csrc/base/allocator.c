/* Host allocators: the system allocator and a fault-injecting one. */
#include <stdlib.h>
#include <string.h>

#include "tpu/base.h"

static void* sys_alloc(void* self, size_t n) {
  (void)self;
  return malloc(n ? n : 1);
}
static void* sys_realloc(void* self, void* p, size_t n) {
  (void)self;
  return realloc(p, n ? n : 1);
}
static void sys_free(void* self, void* p) {
  (void)self;
  free(p);
}

tpu_allocator_t tpu_allocator_system(void) {
  tpu_allocator_t a = {NULL, sys_alloc, sys_realloc, sys_free};
  return a;
}

tpu_status_t tpu_alloc_zeroed(tpu_allocator_t a, size_t n, const char* what,
                              void** out) {
  *out = NULL;
  void* p = tpu_alloc(a, n);
  if (!p)
    return TPU_STATUS(RESOURCE_EXHAUSTED,
                      "host allocation of %zu bytes for %s failed", n, what);
  memset(p, 0, n);
  *out = p;
  return NULL;
}

static bool fault_should_fail(tpu_fault_allocator_t* s) {
  s->count++;
  if (s->fail_at == 0) return false;
  if (s->count == s->fail_at) return true;
  return s->sticky && s->count > s->fail_at;
}

static void* fault_alloc(void* self, size_t n) {
  tpu_fault_allocator_t* s = self;
  if (fault_should_fail(s)) return NULL;
  void* p = malloc(n ? n : 1);
  if (p) s->live++;
  return p;
}
static void* fault_realloc(void* self, void* p, size_t n) {
  tpu_fault_allocator_t* s = self;
  if (fault_should_fail(s)) return NULL;
  void* q = realloc(p, n ? n : 1);
  if (q && !p) s->live++;
  return q;
}
static void fault_free(void* self, void* p) {
  tpu_fault_allocator_t* s = self;
  if (p) s->live--;
  free(p);
}

tpu_allocator_t tpu_fault_allocator(tpu_fault_allocator_t* state) {
  tpu_allocator_t a = {state, fault_alloc, fault_realloc, fault_free};
  return a;
}
