/* Op handles: the per-call path from an aten op to an enqueued executable.
 *
 * PyTorch calls an Op object (registered with torch.library for the tpu
 * dispatch key) with the aten arguments. The call is flattened by the op's
 * argument spec into tensors, runtime scalars and static values; a 128-bit
 * fingerprint of the op, the tensors' dtypes/shapes/strides, the scalars'
 * types, the static values and (for matmul-like ops) the precision selects a
 * cached plan. On a miss the Python lowering rule builds an IR graph, which
 * is compiled and cached; on a hit nothing is lowered or compiled. The plan
 * binds the flattened arguments to the executable's parameters, allocates
 * the outputs and enqueues the work.
 */
#include <string.h>

#include "py_impl.h"

enum {
  K_STATIC = 0,      /* hashed by value, part of the program */
  K_TENSOR = 1,      /* Tensor / Optional[Tensor] */
  K_TENSOR_LIST = 2, /* List[Tensor] / List[Optional[Tensor]] */
  K_SCALAR = 3,      /* runtime operand: only its type is hashed */
};

/* parameter sources; the RNG ones draw (seed, offset) for index numbers */
enum { B_TENSOR = 0, B_SCALAR = 1, B_RNG_SEED = 2, B_RNG_OFFSET = 3 };
enum { R_OUTPUT = 0, R_ALIAS = 1, R_NONE = 2 };  /* result sources */

typedef struct {
  int32_t kind, index;
} pair_t;

/* A cached plan, kept as the executable's user data. */
typedef struct {
  int32_t n_binds;
  pair_t* binds;     /* per executable parameter */
  int32_t n_results;
  pair_t* results;   /* per aten result */
  bool single;       /* the aten op returns one Tensor, not a tuple */
  bool fallback;     /* no executable: call the op's fallback */
  bool non_native;   /* computes in a dtype a TPU only emulates (f64) */
} plan_t;

static void plan_free(void* p) {
  plan_t* plan = p;
  if (!plan) return;
  free(plan->binds);
  free(plan->results);
  free(plan);
}

typedef struct {
  PyObject_HEAD
  PyObject* name;       /* "aten::add.Tensor" */
  PyObject* lower;      /* lower(op, tensors, scalar_names, args, kwargs) */
  PyObject* fallback;   /* fallback(args, kwargs) or None */
  PyObject* pos_names;  /* tuple of str */
  PyObject* kw_kinds;   /* dict name -> kind */
  int32_t n_pos;
  uint8_t pos_kinds[64];
  bool uses_precision;
  bool allow_cpu_tensors; /* e.g. index tensors may live on the CPU */
  uint64_t name_hash;
  const char* site; /* UTF-8 of name, owned by name */
  uint64_t calls, misses;
  uint64_t non_native_calls; /* calls whose program computes in f64 etc. */
} OpObject;

/* --------------------------------------------------------- flattening */

typedef struct {
  tpu_py_tensor_t* t;
  int32_t n, cap;
  tpu_py_tensor_t small[16];
  /* runtime scalars: values borrowed, names owned (list elements get
   * "name.i") */
  PyObject** scalars;
  PyObject** scalar_names;
  int32_t n_scalars, cap_scalars;
  PyObject* scalars_small[16];
  PyObject* names_small[16];
  tpu_hasher_t h;
  bool has_tpu;
} flat_t;

static int flat_push_scalar(flat_t* f, PyObject* name, PyObject* v) {
  if (f->n_scalars == f->cap_scalars) {
    int32_t nc = f->cap_scalars * 2;
    PyObject** ns = malloc(sizeof(PyObject*) * (size_t)nc);
    PyObject** nn = malloc(sizeof(PyObject*) * (size_t)nc);
    if (!ns || !nn) {
      free(ns);
      free(nn);
      PyErr_NoMemory();
      return -1;
    }
    memcpy(ns, f->scalars, sizeof(PyObject*) * (size_t)f->n_scalars);
    memcpy(nn, f->scalar_names, sizeof(PyObject*) * (size_t)f->n_scalars);
    if (f->scalars != f->scalars_small) free(f->scalars);
    if (f->scalar_names != f->names_small) free(f->scalar_names);
    f->scalars = ns;
    f->scalar_names = nn;
    f->cap_scalars = nc;
  }
  Py_INCREF(name);
  f->scalars[f->n_scalars] = v;
  f->scalar_names[f->n_scalars] = name;
  f->n_scalars++;
  tpu_hasher_add_u64(&f->h, 0x73);
  tpu_hasher_add_u64(&f->h, (uint64_t)(uintptr_t)Py_TYPE(v));
  return 0;
}

static void flat_free(flat_t* f) {
  for (int32_t i = 0; i < f->n_scalars; i++) Py_DECREF(f->scalar_names[i]);
  if (f->scalars != f->scalars_small) free(f->scalars);
  if (f->scalar_names != f->names_small) free(f->scalar_names);
  if (f->t != f->small) free(f->t);
}

static int is_number(PyObject* o) {
  return PyLong_Check(o) || PyFloat_Check(o) || PyBool_Check(o) || PyComplex_Check(o);
}

static int flat_push_tensor(flat_t* f, PyObject* obj, const OpObject* op) {
  if (f->n == f->cap) {
    int32_t nc = f->cap * 2;
    tpu_py_tensor_t* nt = malloc(sizeof(tpu_py_tensor_t) * (size_t)nc);
    if (!nt) {
      PyErr_NoMemory();
      return -1;
    }
    memcpy(nt, f->t, sizeof(tpu_py_tensor_t) * (size_t)f->n);
    if (f->t != f->small) free(f->t);
    f->t = nt;
    f->cap = nc;
  }
  tpu_py_tensor_t* t = &f->t[f->n];
  if (tpu_py_tensor_read(obj, t) < 0) return -1;
  if (t->is_cpu && t->rank != 0 && !op->allow_cpu_tensors) {
    PyErr_SetString(PyExc_RuntimeError,
                    "Expected all tensors to be on the same device, but found at least "
                    "two devices, tpu:0 and cpu!");
    return -1;
  }
  if (!t->is_cpu) f->has_tpu = true;
  tpu_hasher_add_u64(&f->h, ((uint64_t)t->is_cpu << 40) | ((uint64_t)t->dtype << 32) | (uint64_t)t->rank);
  tpu_hasher_add_bytes(&f->h, t->dims, sizeof(int64_t) * (size_t)t->rank);
  if (!t->is_cpu || t->rank != 0)
    tpu_hasher_add_bytes(&f->h, t->strides, sizeof(int64_t) * (size_t)t->rank);
  f->n++;
  return 0;
}

/* Hashes a static Python value (with its type, since 1 == 1.0 == True). */
static int hash_static(tpu_hasher_t* h, PyObject* o, int depth) {
  if (depth > 8) {
    PyErr_SetString(PyExc_ValueError, "argument nested too deeply");
    return -1;
  }
  if (o == Py_None) {
    tpu_hasher_add_u64(h, 0x4e4f4e45);
  } else if (PyBool_Check(o)) {
    tpu_hasher_add_u64(h, o == Py_True ? 0xb001 : 0xb000);
  } else if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    tpu_hasher_add_u64(h, 0x1147);
    tpu_hasher_add_u64(h, overflow ? (uint64_t)PyObject_Hash(o) : (uint64_t)v);
  } else if (PyFloat_Check(o)) {
    double d = PyFloat_AS_DOUBLE(o);
    tpu_hasher_add_u64(h, 0xf10a7);
    tpu_hasher_add_bytes(h, &d, sizeof d);
  } else if (PyList_Check(o) || PyTuple_Check(o)) {
    PyObject* seq = PySequence_Fast(o, "");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    tpu_hasher_add_u64(h, 0x5e9 ^ ((uint64_t)n << 16));
    for (Py_ssize_t i = 0; i < n; i++) {
      if (hash_static(h, PySequence_Fast_GET_ITEM(seq, i), depth + 1) < 0) {
        Py_DECREF(seq);
        return -1;
      }
    }
    Py_DECREF(seq);
  } else {
    Py_hash_t hv = PyObject_Hash(o);
    if (hv == -1) return -1;
    tpu_hasher_add_u64(h, (uint64_t)(uintptr_t)Py_TYPE(o));
    tpu_hasher_add_u64(h, (uint64_t)hv);
  }
  return 0;
}

static int is_tensor(PyObject* o) {
  return PyObject_TypeCheck(o, tpu_py.tensor_type);
}

static int flatten_arg(flat_t* f, const OpObject* op, int kind, PyObject* name,
                       PyObject* v) {
  /* K_SCALAR/K_TENSOR recurse into each other at most once */
  switch (kind) {
    case K_TENSOR:
      if (v == Py_None) {
        tpu_hasher_add_u64(&f->h, 0x70);
        return 0;
      }
      if (!is_tensor(v)) /* a wrapped number arrives as a Python scalar */
        return flatten_arg(f, op, K_SCALAR, name, v);
      return flat_push_tensor(f, v, op);
    case K_TENSOR_LIST: {
      PyObject* seq = PySequence_Fast(v, "expected a list of tensors");
      if (!seq) return -1;
      Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
      tpu_hasher_add_u64(&f->h, 0x71 ^ ((uint64_t)n << 8));
      for (Py_ssize_t i = 0; i < n; i++) {
        PyObject* e = PySequence_Fast_GET_ITEM(seq, i);
        if (e == Py_None) {
          tpu_hasher_add_u64(&f->h, 0x70);
          continue;
        }
        if (flat_push_tensor(f, e, op) < 0) {
          Py_DECREF(seq);
          return -1;
        }
      }
      Py_DECREF(seq);
      return 0;
    }
    case K_SCALAR:
      if (v == Py_None || is_tensor(v)) {
        /* None or a tensor changes the program: treat as static/tensor */
        if (v == Py_None) {
          tpu_hasher_add_u64(&f->h, 0x72);
          return 0;
        }
        return flat_push_tensor(f, v, op);
      }
      if (PyList_Check(v) || PyTuple_Check(v)) {
        /* a ScalarList: every element is a runtime operand "name.i" */
        PyObject* seq = PySequence_Fast(v, "");
        if (!seq) return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        tpu_hasher_add_u64(&f->h, 0x74 ^ ((uint64_t)n << 8));
        for (Py_ssize_t i = 0; i < n; i++) {
          PyObject* e = PySequence_Fast_GET_ITEM(seq, i);
          int rc;
          if (is_number(e)) {
            PyObject* en = PyUnicode_FromFormat("%S.%zd", name, i);
            rc = en ? flat_push_scalar(f, en, e) : -1;
            Py_XDECREF(en);
          } else {
            rc = hash_static(&f->h, e, 1);
          }
          if (rc < 0) {
            Py_DECREF(seq);
            return -1;
          }
        }
        Py_DECREF(seq);
        return 0;
      }
      return flat_push_scalar(f, name, v);
    default:
      return hash_static(&f->h, v, 0);
  }
}

/* ---------------------------------------------------------------- call */

static tpu_status_t plan_from_py(PyObject* binds, PyObject* results, int single,
                                 plan_t** out) {
  *out = NULL;
  plan_t* p = calloc(1, sizeof(*p));
  if (!p) return TPU_STATUS(RESOURCE_EXHAUSTED, "plan");
  Py_ssize_t nb = PySequence_Size(binds), nr = PySequence_Size(results);
  if (nb < 0 || nr < 0) {
    plan_free(p);
    return TPU_STATUS(INVALID_ARGUMENT, "lowering returned malformed binds/results");
  }
  p->n_binds = (int32_t)nb;
  p->n_results = (int32_t)nr;
  p->binds = calloc((size_t)(nb ? nb : 1), sizeof(pair_t));
  p->results = calloc((size_t)(nr ? nr : 1), sizeof(pair_t));
  p->single = single != 0;
  if (!p->binds || !p->results) {
    plan_free(p);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "plan");
  }
  for (int pass = 0; pass < 2; pass++) {
    PyObject* seq = pass ? results : binds;
    pair_t* dst = pass ? p->results : p->binds;
    Py_ssize_t n = pass ? nr : nb;
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject* item = PySequence_GetItem(seq, i);
      int a = 0, b = 0;
      bool ok = item && PyArg_ParseTuple(item, "ii", &a, &b);
      Py_XDECREF(item);
      if (!ok) {
        PyErr_Clear();
        plan_free(p);
        return TPU_STATUS(INVALID_ARGUMENT, "lowering returned a malformed pair");
      }
      dst[i].kind = a;
      dst[i].index = b;
    }
  }
  *out = p;
  return NULL;
}

/* Builds the Python result from a plan and the output list. */
static PyObject* build_result(const plan_t* plan, const flat_t* f, PyObject* outs) {
  if (plan->n_results == 0) Py_RETURN_NONE;
  int32_t n = plan->n_results;
  PyObject* t = plan->single ? NULL : PyTuple_New(n);
  if (!plan->single && !t) return NULL;
  for (int32_t i = 0; i < n; i++) {
    pair_t r = plan->results[i];
    PyObject* o;
    if (r.kind == R_OUTPUT) o = PyList_GET_ITEM(outs, r.index);
    else if (r.kind == R_ALIAS) o = f->t[r.index].obj;
    else o = Py_None;
    Py_INCREF(o);
    if (plan->single) return o;
    PyTuple_SET_ITEM(t, i, o);
  }
  return t;
}

static PyObject* op_call(OpObject* self, PyObject* args, PyObject* kwargs) {
  if (tpu_py_check_init() < 0) return NULL;
  uint64_t tp = tpu_py.profile ? tpu_now_ns() : 0;
  self->calls++;
  tpu_py.stats.dispatches++;
  flat_t f;
  f.t = f.small;
  f.n = 0;
  f.cap = 16;
  f.n_scalars = 0;
  f.cap_scalars = 16;
  f.scalars = f.scalars_small;
  f.scalar_names = f.names_small;
  f.has_tpu = false;
  tpu_hasher_init(&f.h, self->name_hash ^ tpu_py.config_hash);
  PyObject* result = NULL;
  PyObject* outs = NULL;
  tpu_executable_t* exe = NULL;
  Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  for (Py_ssize_t i = 0; i < nargs; i++) {
    int kind = i < self->n_pos ? self->pos_kinds[i] : K_STATIC;
    PyObject* name = i < PyTuple_GET_SIZE(self->pos_names) ? PyTuple_GET_ITEM(self->pos_names, i) : Py_None;
    tpu_hasher_add_u64(&f.h, 0xa000 + (uint64_t)i);
    if (flatten_arg(&f, self, kind, name, PyTuple_GET_ITEM(args, i)) < 0) goto done;
  }
  if (kwargs) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      PyObject* k = PyDict_GetItem(self->kw_kinds, key);
      int kind = k ? (int)PyLong_AsLong(k) : K_STATIC;
      tpu_hasher_add_u64(&f.h, (uint64_t)PyObject_Hash(key));
      if (flatten_arg(&f, self, kind, key, value) < 0) goto done;
    }
  }
  int precision = TPU_PRECISION_HIGHEST;
  if (self->uses_precision) {
    precision = tpu_py_effective_precision();
    if (precision < 0) goto done;
    tpu_hasher_add_u64(&f.h, 0x9900 + (uint64_t)precision);
  }
  tpu_hash128_t key = tpu_hasher_finish(&f.h);
  tpu_py_prof(&tp, &tpu_py.stats.t_flatten);
  exe = tpu_cache_lookup(tpu_py.cache, key);
  tpu_py_prof(&tp, &tpu_py.stats.t_lookup);
  if (!exe) {
    /* miss: lower in Python, compile, cache */
    self->misses++;
    tpu_py.stats.lowerings++;
    uint64_t t0 = tpu_now_ns();
    PyObject* tensors = PyTuple_New(f.n);
    PyObject* names = PyTuple_New(f.n_scalars);
    if (!tensors || !names) {
      Py_XDECREF(tensors);
      Py_XDECREF(names);
      goto done;
    }
    for (int32_t i = 0; i < f.n; i++) {
      Py_INCREF(f.t[i].obj);
      PyTuple_SET_ITEM(tensors, i, f.t[i].obj);
    }
    for (int32_t i = 0; i < f.n_scalars; i++) {
      Py_INCREF(f.scalar_names[i]);
      PyTuple_SET_ITEM(names, i, f.scalar_names[i]);
    }
    PyObject* kw = kwargs ? kwargs : Py_None;
    PyObject* low = PyObject_CallFunctionObjArgs(self->lower, (PyObject*)self, tensors, names,
                                                 args, kw, NULL);
    Py_DECREF(tensors);
    Py_DECREF(names);
    if (!low) goto done;
    /* (graph, binds, results, single) or ("fallback", value) */
    if (PyTuple_Check(low) && PyTuple_GET_SIZE(low) == 2 &&
        PyUnicode_Check(PyTuple_GET_ITEM(low, 0))) {
      result = PyTuple_GET_ITEM(low, 1);
      Py_INCREF(result);
      Py_DECREF(low);
      goto done;
    }
    PyObject *gobj, *binds, *results;
    int single;
    if (!PyArg_ParseTuple(low, "OOOp", &gobj, &binds, &results, &single)) {
      Py_DECREF(low);
      goto done;
    }
    tpu_graph_t* g = tpu_py_graph_get(gobj);
    plan_t* plan = NULL;
    tpu_status_t st = g ? plan_from_py(binds, results, single, &plan) : NULL;
    if (g && !st) {
      int32_t nn = tpu_graph_node_count(g);
      for (int32_t v = 0; v < nn && !plan->non_native; v++) {
        plan->non_native = !tpu_dtype_info(tpu_graph_node_dtype(g, v))->tpu_native;
      }
      st = tpu_executable_compile(tpu_py.device, g, (tpu_precision_t)precision, NULL, &exe);
      if (!st) {
        tpu_py.stats.compiles++;
        exe->user_data = plan;
        exe->user_data_free = plan_free;
        plan = NULL;
        st = tpu_cache_insert(tpu_py.cache, key, exe);
      }
      plan_free(plan);
    }
    Py_DECREF(low);
    tpu_py.stats.compile_ns += tpu_now_ns() - t0;
    if (!g) goto done;
    if (st) {
      PyObject* n = self->name;
      st = tpu_status_annotate(st, "%s", PyUnicode_AsUTF8(n));
      tpu_py_raise(st);
      goto done;
    }
  }
  {
    plan_t* plan = exe->user_data;
    if (plan->non_native) self->non_native_calls++;
    PyObject* params_small[16];
    const tpu_py_tensor_t* metas_small[16];
    PyObject** params = exe->n_params <= 16 ? params_small
                                            : malloc(sizeof(PyObject*) * (size_t)exe->n_params);
    const tpu_py_tensor_t** metas =
        exe->n_params <= 16 ? metas_small
                            : malloc(sizeof(tpu_py_tensor_t*) * (size_t)exe->n_params);
    if (!params || !metas) {
      if (params != params_small) free(params);
      if (metas != metas_small) free(metas);
      PyErr_NoMemory();
      goto done;
    }
    PyObject* rng = NULL; /* (seed, offset) drawn once per call */
    for (int32_t i = 0; i < plan->n_binds && i < exe->n_params; i++) {
      pair_t b = plan->binds[i];
      if (b.kind == B_RNG_SEED || b.kind == B_RNG_OFFSET) {
        if (!rng) {
          rng = PyObject_CallFunction(tpu_py.rng_next, "L", (long long)b.index);
          if (!rng || !PyTuple_Check(rng) || PyTuple_GET_SIZE(rng) != 2) {
            if (rng && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "rng state");
            Py_XDECREF(rng);
            if (params != params_small) free(params);
            if (metas != metas_small) free(metas);
            goto done;
          }
        }
        params[i] = PyTuple_GET_ITEM(rng, b.kind == B_RNG_SEED ? 0 : 1);
        metas[i] = NULL;
        continue;
      }
      params[i] = b.kind == B_TENSOR ? f.t[b.index].obj : f.scalars[b.index];
      metas[i] = b.kind == B_TENSOR ? &f.t[b.index] : NULL;
    }
    outs = tpu_py_run_ex(exe, params, metas, exe->n_params, self->site);
    Py_XDECREF(rng);
    if (params != params_small) free(params);
    if (metas != metas_small) free(metas);
    if (!outs) goto done;
    if (tpu_py.profile) tp = tpu_now_ns();
    result = build_result(plan, &f, outs);
    tpu_py_prof(&tp, &tpu_py.stats.t_result);
    tpu_py.stats.t_calls++;
  }
done:
  Py_XDECREF(outs);
  tpu_executable_release(exe);
  flat_free(&f);
  return result;
}

/* ---------------------------------------------------------- the type */

static int op_init(OpObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"name", "lower", "pos_kinds", "pos_names", "kw_kinds",
                           "uses_precision", "allow_cpu_tensors", "fallback", NULL};
  PyObject *name, *lower, *pos_kinds, *pos_names, *kw_kinds, *fallback = Py_None;
  int uses_precision = 0, allow_cpu = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOOOO|ppO", kwlist, &name, &lower, &pos_kinds,
                                   &pos_names, &kw_kinds, &uses_precision, &allow_cpu, &fallback))
    return -1;
  if (!PyDict_Check(kw_kinds) || !PyTuple_Check(pos_names)) {
    PyErr_SetString(PyExc_TypeError, "kw_kinds must be a dict and pos_names a tuple");
    return -1;
  }
  PyObject* seq = PySequence_Fast(pos_kinds, "pos_kinds must be a sequence");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > 64) {
    Py_DECREF(seq);
    PyErr_SetString(PyExc_ValueError, "too many positional arguments");
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    long k = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
    if (k < 0 || k > K_SCALAR) {
      Py_DECREF(seq);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad argument kind");
      return -1;
    }
    self->pos_kinds[i] = (uint8_t)k;
  }
  Py_DECREF(seq);
  self->n_pos = (int32_t)n;
  Py_INCREF(name);
  Py_XSETREF(self->name, name);
  Py_INCREF(lower);
  Py_XSETREF(self->lower, lower);
  Py_INCREF(pos_names);
  Py_XSETREF(self->pos_names, pos_names);
  Py_INCREF(kw_kinds);
  Py_XSETREF(self->kw_kinds, kw_kinds);
  Py_INCREF(fallback);
  Py_XSETREF(self->fallback, fallback);
  self->uses_precision = uses_precision != 0;
  self->allow_cpu_tensors = allow_cpu != 0;
  Py_ssize_t len;
  const char* s = PyUnicode_AsUTF8AndSize(name, &len);
  self->site = s;
  tpu_hasher_t h;
  tpu_hasher_init(&h, 0x6f70);
  tpu_hasher_add_bytes(&h, s, (size_t)len);
  self->name_hash = tpu_hasher_finish(&h).lo;
  return 0;
}

static void op_dealloc(OpObject* self) {
  Py_XDECREF(self->name);
  Py_XDECREF(self->lower);
  Py_XDECREF(self->pos_names);
  Py_XDECREF(self->kw_kinds);
  Py_XDECREF(self->fallback);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* op_get_name(OpObject* self, void* c) {
  (void)c;
  Py_INCREF(self->name);
  return self->name;
}
static PyObject* op_get_calls(OpObject* self, void* c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(self->calls);
}
static PyObject* op_get_non_native_calls(OpObject* self, void* c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(self->non_native_calls);
}
static PyObject* op_get_misses(OpObject* self, void* c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(self->misses);
}
static PyObject* op_get_fallback(OpObject* self, void* c) {
  (void)c;
  Py_INCREF(self->fallback);
  return self->fallback;
}

static PyGetSetDef op_getset[] = {
    {"name", (getter)op_get_name, NULL, "aten op name", NULL},
    {"calls", (getter)op_get_calls, NULL, "number of calls", NULL},
    {"misses", (getter)op_get_misses, NULL, "number of cache misses (lowerings)", NULL},
    {"non_native_calls", (getter)op_get_non_native_calls, NULL,
     "calls whose program computes in a dtype a TPU only emulates (float64)", NULL},
    {"fallback", (getter)op_get_fallback, NULL, "the CPU fallback callable", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject* op_repr(OpObject* self) {
  return PyUnicode_FromFormat("<torchtpu op %U>", self->name);
}

static PyTypeObject TpuOp_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchtpu._C.Op",
    .tp_basicsize = sizeof(OpObject),
    .tp_dealloc = (destructor)op_dealloc,
    .tp_repr = (reprfunc)op_repr,
    .tp_call = (ternaryfunc)op_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An aten op implemented on tpu: fingerprint, cache, bind, enqueue.",
    .tp_getset = op_getset,
    .tp_init = (initproc)op_init,
    .tp_new = PyType_GenericNew,
};

int tpu_py_dispatch_register(PyObject* m) {
  if (PyType_Ready(&TpuOp_Type) < 0) return -1;
  Py_INCREF(&TpuOp_Type);
  if (PyModule_AddObject(m, "Op", (PyObject*)&TpuOp_Type) < 0) return -1;
  PyModule_AddIntConstant(m, "K_STATIC", K_STATIC);
  PyModule_AddIntConstant(m, "K_TENSOR", K_TENSOR);
  PyModule_AddIntConstant(m, "K_TENSOR_LIST", K_TENSOR_LIST);
  PyModule_AddIntConstant(m, "K_SCALAR", K_SCALAR);
  PyModule_AddIntConstant(m, "B_TENSOR", B_TENSOR);
  PyModule_AddIntConstant(m, "B_SCALAR", B_SCALAR);
  PyModule_AddIntConstant(m, "B_RNG_SEED", B_RNG_SEED);
  PyModule_AddIntConstant(m, "B_RNG_OFFSET", B_RNG_OFFSET);
  PyModule_AddIntConstant(m, "R_OUTPUT", R_OUTPUT);
  PyModule_AddIntConstant(m, "R_ALIAS", R_ALIAS);
  PyModule_AddIntConstant(m, "R_NONE", R_NONE);
  return 0;
}
