/* Python types for building IR graphs (used by lowering rules on a cache
 * miss) and for compiled executables, plus the generic bind-and-enqueue
 * path. */
#include <math.h>
#include <string.h>

#include "py_impl.h"

/* ------------------------------------------------------------- Graph */

typedef struct {
  PyObject_HEAD
  tpu_graph_t* g;
} GraphObject;

static PyObject* graph_new(PyTypeObject* type, PyObject* args, PyObject* kw) {
  (void)args;
  (void)kw;
  GraphObject* self = (GraphObject*)type->tp_alloc(type, 0);
  if (!self) return NULL;
  tpu_status_t st = tpu_graph_create(tpu_allocator_system(), &self->g);
  if (st) {
    Py_DECREF(self);
    return tpu_py_raise(st);
  }
  return (PyObject*)self;
}

static void graph_dealloc(GraphObject* self) {
  tpu_graph_destroy(self->g);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

tpu_graph_t* tpu_py_graph_get(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, &TpuGraph_Type)) {
    PyErr_SetString(PyExc_TypeError, "expected a torchtpu._C.Graph");
    return NULL;
  }
  return ((GraphObject*)obj)->g;
}

static int parse_ints(PyObject* seq, int64_t* out, int32_t cap, int32_t* n) {
  PyObject* t = PySequence_Tuple(seq);
  if (!t) return -1;
  Py_ssize_t len = PyTuple_GET_SIZE(t);
  if (len > cap) {
    Py_DECREF(t);
    PyErr_Format(PyExc_ValueError, "too many integers (%zd > %d)", len, cap);
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
    if (out[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(t);
      return -1;
    }
  }
  Py_DECREF(t);
  *n = (int32_t)len;
  return 0;
}

static int parse_shape(PyObject* seq, tpu_shape_t* sh) {
  memset(sh, 0, sizeof(*sh));
  return parse_ints(seq, sh->dims, TPU_MAX_RANK, &sh->rank);
}

static int check_dtype(int d) {
  if (!tpu_dtype_valid(d)) {
    PyErr_Format(PyExc_ValueError, "invalid dtype code %d", d);
    return -1;
  }
  return 0;
}

/* param(dtype, shape, strides=None) -> value */
static PyObject* graph_param(GraphObject* self, PyObject* args) {
  int dtype;
  PyObject *shape, *strides = Py_None;
  if (!PyArg_ParseTuple(args, "iO|O", &dtype, &shape, &strides)) return NULL;
  if (check_dtype(dtype) < 0) return NULL;
  tpu_shape_t sh;
  if (parse_shape(shape, &sh) < 0) return NULL;
  int64_t st[TPU_MAX_RANK];
  int32_t n = 0;
  if (strides != Py_None) {
    if (parse_ints(strides, st, TPU_MAX_RANK, &n) < 0) return NULL;
    if (n != sh.rank) {
      PyErr_SetString(PyExc_ValueError, "strides and shape differ in length");
      return NULL;
    }
  }
  tpu_value_t v;
  tpu_status_t s = tpu_graph_add_parameter(self->g, (tpu_dtype_t)dtype, &sh,
                                           strides == Py_None ? NULL : st, &v);
  if (s) return tpu_py_raise(s);
  return PyLong_FromLong(v);
}

static PyObject* graph_scalar(GraphObject* self, PyObject* args) {
  int dtype;
  if (!PyArg_ParseTuple(args, "i", &dtype)) return NULL;
  if (check_dtype(dtype) < 0) return NULL;
  tpu_value_t v;
  tpu_status_t s = tpu_graph_add_scalar_parameter(self->g, (tpu_dtype_t)dtype, &v);
  if (s) return tpu_py_raise(s);
  return PyLong_FromLong(v);
}

/* constant(dtype, shape, data: bytes) -> value */
static PyObject* graph_constant(GraphObject* self, PyObject* args) {
  int dtype;
  PyObject* shape;
  Py_buffer data;
  if (!PyArg_ParseTuple(args, "iOy*", &dtype, &shape, &data)) return NULL;
  PyObject* res = NULL;
  tpu_shape_t sh;
  if (check_dtype(dtype) == 0 && parse_shape(shape, &sh) == 0) {
    int64_t need = tpu_shape_numel(&sh) * tpu_dtype_size((tpu_dtype_t)dtype);
    if (need != data.len) {
      PyErr_Format(PyExc_ValueError, "constant needs %lld bytes, got %zd", (long long)need, data.len);
    } else {
      tpu_value_t v;
      tpu_status_t s = tpu_graph_add_constant(self->g, (tpu_dtype_t)dtype, &sh, data.buf, &v);
      res = s ? tpu_py_raise(s) : PyLong_FromLong(v);
    }
  }
  PyBuffer_Release(&data);
  return res;
}

/* node(op, operands, kind=0, ints=(), attr_dtype=-1, dtype=None, shape=None) */
static PyObject* graph_node(GraphObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"op", "operands", "kind", "ints", "attr_dtype", "dtype", "shape", NULL};
  const char* name;
  PyObject* operands;
  int kind = 0, attr_dtype = -1;
  PyObject *ints = NULL, *dtype = Py_None, *shape = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|iOiOO", kwlist, &name, &operands,
                                   &kind, &ints, &attr_dtype, &dtype, &shape))
    return NULL;
  tpu_opcode_t op;
  tpu_status_t s = tpu_op_from_name(name, strlen(name), &op);
  if (s) return tpu_py_raise(s);
  int64_t ops64[256];
  int32_t n_ops = 0;
  if (parse_ints(operands, ops64, 256, &n_ops) < 0) return NULL;
  tpu_value_t ops[256];
  for (int32_t i = 0; i < n_ops; i++) ops[i] = (tpu_value_t)ops64[i];
  int64_t iv[TPU_MAX_ATTR_INTS];
  int32_t n_ints = 0;
  if (ints && parse_ints(ints, iv, (int32_t)TPU_ARRAY_SIZE(iv), &n_ints) < 0) return NULL;
  tpu_attrs_t at;
  memset(&at, 0, sizeof(at));
  at.kind = kind;
  at.dtype = attr_dtype >= 0 ? (tpu_dtype_t)attr_dtype : TPU_DTYPE_PRED;
  if (attr_dtype >= 0 && check_dtype(attr_dtype) < 0) return NULL;
  at.n_ints = n_ints;
  at.ints = iv;
  tpu_value_t v;
  if (dtype != Py_None || shape != Py_None) {
    if (dtype == Py_None || shape == Py_None) {
      PyErr_SetString(PyExc_ValueError, "give both dtype and shape, or neither");
      return NULL;
    }
    int d = (int)PyLong_AsLong(dtype);
    if (d == -1 && PyErr_Occurred()) return NULL;
    if (check_dtype(d) < 0) return NULL;
    tpu_shape_t sh;
    if (parse_shape(shape, &sh) < 0) return NULL;
    s = tpu_graph_add_node_typed(self->g, op, ops, n_ops, &at, (tpu_dtype_t)d, &sh, &v);
  } else {
    s = tpu_graph_add_node(self->g, op, ops, n_ops, &at, &v);
  }
  if (s) return tpu_py_raise(s);
  return PyLong_FromLong(v);
}

/* output(value, strides=None, alias=-1) */
static PyObject* graph_output(GraphObject* self, PyObject* args) {
  int v, alias = -1;
  PyObject* strides = Py_None;
  if (!PyArg_ParseTuple(args, "i|Oi", &v, &strides, &alias)) return NULL;
  int64_t st[TPU_MAX_RANK];
  int32_t n = 0;
  if (strides != Py_None && parse_ints(strides, st, TPU_MAX_RANK, &n) < 0) return NULL;
  if (v < 0 || v >= tpu_graph_node_count(self->g)) {
    PyErr_SetString(PyExc_ValueError, "output: not a value of this graph");
    return NULL;
  }
  if (strides != Py_None && n != tpu_graph_node_shape(self->g, v)->rank) {
    PyErr_SetString(PyExc_ValueError, "output strides do not match the value's rank");
    return NULL;
  }
  tpu_status_t s = tpu_graph_add_output(self->g, v, strides == Py_None ? NULL : st, alias);
  if (s) return tpu_py_raise(s);
  Py_RETURN_NONE;
}

static PyObject* shape_tuple(const tpu_shape_t* sh) {
  PyObject* t = PyTuple_New(sh->rank);
  if (!t) return NULL;
  for (int32_t i = 0; i < sh->rank; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(sh->dims[i]));
  return t;
}

static PyObject* graph_type(GraphObject* self, PyObject* arg) {
  long v = PyLong_AsLong(arg);
  if (v == -1 && PyErr_Occurred()) return NULL;
  if (v < 0 || v >= tpu_graph_node_count(self->g)) {
    PyErr_SetString(PyExc_ValueError, "not a value of this graph");
    return NULL;
  }
  PyObject* sh = shape_tuple(tpu_graph_node_shape(self->g, (tpu_value_t)v));
  if (!sh) return NULL;
  return Py_BuildValue("(iN)", (int)tpu_graph_node_dtype(self->g, (tpu_value_t)v), sh);
}

static PyObject* graph_text(GraphObject* self, PyObject* unused) {
  (void)unused;
  char* text = NULL;
  tpu_status_t s = tpu_graph_print(self->g, &text);
  if (s) return tpu_py_raise(s);
  PyObject* r = PyUnicode_FromString(text);
  tpu_graph_free_text(self->g, text);
  return r;
}

static PyObject* graph_verify(GraphObject* self, PyObject* unused) {
  (void)unused;
  tpu_status_t s = tpu_graph_verify(self->g);
  if (s) return tpu_py_raise(s);
  Py_RETURN_NONE;
}

static PyObject* graph_fingerprint(GraphObject* self, PyObject* unused) {
  (void)unused;
  tpu_hash128_t h = tpu_graph_fingerprint(self->g);
  return PyUnicode_FromFormat("%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}

static PyObject* graph_parse(PyObject* cls, PyObject* arg) {
  const char* text = PyUnicode_AsUTF8(arg);
  if (!text) return NULL;
  GraphObject* self = (GraphObject*)((PyTypeObject*)cls)->tp_alloc((PyTypeObject*)cls, 0);
  if (!self) return NULL;
  tpu_status_t s = tpu_graph_parse(tpu_allocator_system(), text, &self->g);
  if (s) {
    Py_DECREF(self);
    return tpu_py_raise(s);
  }
  return (PyObject*)self;
}

static PyObject* graph_len(GraphObject* self, void* closure) {
  (void)closure;
  return PyLong_FromLong(tpu_graph_node_count(self->g));
}

static PyMethodDef graph_methods[] = {
    {"param", (PyCFunction)graph_param, METH_VARARGS, "param(dtype, shape, strides=None)"},
    {"scalar", (PyCFunction)graph_scalar, METH_VARARGS, "scalar(dtype): runtime scalar"},
    {"constant", (PyCFunction)graph_constant, METH_VARARGS, "constant(dtype, shape, bytes)"},
    {"node", (PyCFunction)(void (*)(void))graph_node, METH_VARARGS | METH_KEYWORDS,
     "node(op, operands, kind=0, ints=(), attr_dtype=-1, dtype=None, shape=None)"},
    {"output", (PyCFunction)graph_output, METH_VARARGS, "output(value, strides=None, alias=-1)"},
    {"type", (PyCFunction)graph_type, METH_O, "type(value) -> (dtype, shape)"},
    {"text", (PyCFunction)graph_text, METH_NOARGS, "the graph as text"},
    {"verify", (PyCFunction)graph_verify, METH_NOARGS, "run the verifier"},
    {"fingerprint", (PyCFunction)graph_fingerprint, METH_NOARGS, "structural fingerprint"},
    {"parse", (PyCFunction)graph_parse, METH_O | METH_CLASS, "parse graph text"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"num_nodes", (getter)graph_len, NULL, "number of nodes", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TpuGraph_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchtpu._C.Graph",
    .tp_basicsize = sizeof(GraphObject),
    .tp_dealloc = (destructor)graph_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An IR graph under construction.",
    .tp_methods = graph_methods,
    .tp_getset = graph_getset,
    .tp_new = graph_new,
};

/* -------------------------------------------------------- Executable */

typedef struct {
  PyObject_HEAD
  tpu_executable_t* exe;
} ExeObject;

static void exe_dealloc(ExeObject* self) {
  tpu_executable_release(self->exe);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

PyObject* tpu_py_executable_wrap(tpu_executable_t* exe) {
  ExeObject* o = PyObject_New(ExeObject, &TpuExecutable_Type);
  if (!o) {
    tpu_executable_release(exe);
    return NULL;
  }
  o->exe = exe;
  return (PyObject*)o;
}

tpu_executable_t* tpu_py_executable_get(PyObject* obj) {
  if (!PyObject_TypeCheck(obj, &TpuExecutable_Type)) {
    PyErr_SetString(PyExc_TypeError, "expected a torchtpu._C.Executable");
    return NULL;
  }
  return ((ExeObject*)obj)->exe;
}

static PyObject* exe_outputs(ExeObject* self, void* closure) {
  (void)closure;
  PyObject* l = PyList_New(self->exe->n_outputs);
  if (!l) return NULL;
  for (int32_t j = 0; j < self->exe->n_outputs; j++) {
    tpu_output_meta_t* m = &self->exe->outputs[j];
    PyObject* st = PyTuple_New(m->shape.rank);
    for (int32_t i = 0; st && i < m->shape.rank; i++)
      PyTuple_SET_ITEM(st, i, PyLong_FromLongLong(m->strides[i]));
    PyObject* item = st ? Py_BuildValue("(iNNi)", (int)m->dtype, shape_tuple(&m->shape), st, m->alias) : NULL;
    if (!item) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, j, item);
  }
  return l;
}

static PyObject* exe_stats(ExeObject* self, void* closure) {
  (void)closure;
  tpu_exe_stats_t* s = &self->exe->stats;
  return Py_BuildValue("{sKsKsLsLsisdss}", "runs", (unsigned long long)s->runs,
                       "compile_ns", (unsigned long long)s->compile_ns, "temp_bytes",
                       (long long)s->temp_bytes, "temp_bytes_saved", (long long)s->temp_bytes_saved,
                       "kernels", s->n_kernels, "flops", s->flops, "precision",
                       tpu_precision_name(self->exe->precision));
}

static PyObject* exe_text(ExeObject* self, void* closure) {
  (void)closure;
  return PyUnicode_FromString(self->exe->text ? self->exe->text : "");
}

static PyObject* exe_n_params(ExeObject* self, void* closure) {
  (void)closure;
  return PyLong_FromLong(self->exe->n_params);
}

static PyGetSetDef exe_getset[] = {
    {"outputs", (getter)exe_outputs, NULL, "[(dtype, shape, strides, alias)]", NULL},
    {"stats", (getter)exe_stats, NULL, "compile and run statistics", NULL},
    {"text", (getter)exe_text, NULL, "the compiled graph", NULL},
    {"num_params", (getter)exe_n_params, NULL, "number of parameters", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TpuExecutable_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchtpu._C.Executable",
    .tp_basicsize = sizeof(ExeObject),
    .tp_dealloc = (destructor)exe_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled program for the vTPU.",
    .tp_getset = exe_getset,
};

/* ------------------------------------------------------- bind and run */

static int scalar_from_py(PyObject* o, tpu_dtype_t dt, tpu_scalar_t* out) {
  if (PyObject_HasAttr(o, tpu_py.str_item) && !PyFloat_Check(o) && !PyLong_Check(o) &&
      !PyBool_Check(o)) {
    /* a 0-dim CPU tensor: read its value now (enqueue time) */
    PyObject* v = PyObject_CallMethodNoArgs(o, tpu_py.str_item);
    if (!v) return -1;
    int rc = scalar_from_py(v, dt, out);
    Py_DECREF(v);
    return rc;
  }
  if (tpu_dtype_is_float(dt)) {
    if (PyComplex_Check(o)) {
      PyErr_SetString(PyExc_TypeError, "complex scalars are not supported on tpu");
      return -1;
    }
    out->f = PyFloat_AsDouble(o);
    return out->f == -1.0 && PyErr_Occurred() ? -1 : 0;
  }
  if (PyFloat_Check(o)) {
    double d = PyFloat_AsDouble(o);
    out->i = (int64_t)d;
    return 0;
  }
  if (dt == TPU_DTYPE_U64) {
    out->u = PyLong_AsUnsignedLongLongMask(o);
    return PyErr_Occurred() ? -1 : 0;
  }
  int overflow = 0;
  out->i = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow) {
    PyErr_Format(PyExc_RuntimeError, "value cannot be converted to type %s without overflow",
                 tpu_dtype_info(dt)->name);
    return -1;
  }
  return out->i == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Debug eager: fails the op if an output holds NaN or Inf. */
static int check_finite(const tpu_output_meta_t* m, const tpu_arg_t* o, const char* site,
                        int32_t j) {
  if (!tpu_dtype_is_float(m->dtype)) return 0;
  int64_t n = tpu_shape_numel(&m->shape);
  int64_t idx[TPU_MAX_RANK] = {0};
  const char* base = (const char*)o->buffer->data + o->byte_offset;
  int32_t es = tpu_dtype_size(m->dtype);
  for (int64_t e = 0; e < n; e++) {
    int64_t off = 0;
    for (int32_t d = 0; d < m->shape.rank; d++) off += idx[d] * m->strides[d];
    const char* p = base + off * es;
    double v;
    switch (m->dtype) {
      case TPU_DTYPE_F32: v = *(const float*)p; break;
      case TPU_DTYPE_F64: v = *(const double*)p; break;
      case TPU_DTYPE_BF16: v = tpu_bf16_to_f32(*(const uint16_t*)p); break;
      default: v = tpu_f16_to_f32(*(const uint16_t*)p); break;
    }
    if (!isfinite(v)) {
      char sh[160];
      tpu_shape_format(&m->shape, sh, sizeof sh);
      PyErr_Format(PyExc_RuntimeError,
                   "%s produced %s in output %d (shape %s, element %lld) "
                   "[TORCHTPU_DEBUG_CHECKS]", site, v != v ? "NaN" : "Inf", j, sh,
                   (long long)e);
      return -1;
    }
    for (int32_t d = m->shape.rank - 1; d >= 0; d--) {
      if (++idx[d] < m->shape.dims[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

PyObject* tpu_py_run(tpu_executable_t* exe, PyObject* const* params,
                     Py_ssize_t n_params, const char* site) {
  return tpu_py_run_ex(exe, params, NULL, n_params, site);
}

PyObject* tpu_py_run_ex(tpu_executable_t* exe, PyObject* const* params,
                        const tpu_py_tensor_t* const* metas, Py_ssize_t n_params,
                        const char* site) {
  if (n_params != exe->n_params) {
    PyErr_Format(PyExc_ValueError, "executable takes %d parameters, got %zd", exe->n_params, n_params);
    return NULL;
  }
  uint64_t tp = tpu_py.profile ? tpu_now_ns() : 0;
  tpu_arg_t args_small[16], outs_small[8];
  tpu_arg_t* args = n_params <= 16 ? args_small : calloc((size_t)n_params, sizeof(tpu_arg_t));
  tpu_arg_t* outs = exe->n_outputs <= 8 ? outs_small : calloc((size_t)exe->n_outputs, sizeof(tpu_arg_t));
  PyObject* result = NULL;
  if (!args || !outs) {
    PyErr_NoMemory();
    goto done;
  }
  memset(args, 0, sizeof(tpu_arg_t) * (size_t)n_params);
  for (Py_ssize_t i = 0; i < n_params; i++) {
    if (exe->param_kinds[i] == TPU_PARAM_SCALAR) {
      if (scalar_from_py(params[i], exe->param_dtypes[i], &args[i].scalar) < 0) goto done;
      continue;
    }
    tpu_py_tensor_t read;
    const tpu_py_tensor_t* t = metas ? metas[i] : NULL;
    if (!t) {
      if (tpu_py_tensor_read(params[i], &read) < 0) goto done;
      t = &read;
    }
    if (t->is_cpu) {
      PyErr_Format(PyExc_RuntimeError, "%s: parameter %zd must be a tpu tensor", site, i);
      goto done;
    }
    args[i].buffer = tpu_py_tensor_buffer(t, &args[i].byte_offset);
    if (!args[i].buffer) goto done;
  }
  tpu_py_prof(&tp, &tpu_py.stats.t_bind);
  result = PyList_New(exe->n_outputs);
  if (!result) goto done;
  for (int32_t j = 0; j < exe->n_outputs; j++) {
    tpu_output_meta_t* m = &exe->outputs[j];
    if (m->alias >= 0) {
      outs[j] = args[m->alias];
      Py_INCREF(params[m->alias]);
      PyList_SET_ITEM(result, j, params[m->alias]);
      continue;
    }
    tpu_buffer_t* b = NULL;
    PyObject* t = tpu_py_new_tensor(m->dtype, m->shape.rank, m->shape.dims, m->strides, &b);
    if (!t) {
      Py_CLEAR(result);
      goto done;
    }
    outs[j].buffer = b;
    outs[j].byte_offset = 0;
    PyList_SET_ITEM(result, j, t);
  }
  tpu_py_prof(&tp, &tpu_py.stats.t_alloc);
  tpu_status_t st;
  if (tpu_stream_is_synchronous(tpu_py.stream)) {
    for (Py_ssize_t i = 0; i < n_params; i++) tpu_buffer_retain(args[i].buffer);
    Py_BEGIN_ALLOW_THREADS
    st = tpu_stream_enqueue(tpu_py.stream, exe, args, outs, site);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_params; i++) tpu_buffer_release(args[i].buffer);
  } else {
    st = tpu_stream_enqueue(tpu_py.stream, exe, args, outs, site);
    if (!st) tpu_py_note_site();
  }
  tpu_py.stats.executions++;
  tpu_py_prof(&tp, &tpu_py.stats.t_enqueue);
  if (st) {
    Py_CLEAR(result);
    tpu_py_raise(st);
  } else if (tpu_py.debug_checks && tpu_stream_is_synchronous(tpu_py.stream)) {
    for (int32_t j = 0; j < exe->n_outputs; j++) {
      if (check_finite(&exe->outputs[j], &outs[j], site, j) < 0) {
        Py_CLEAR(result);
        break;
      }
    }
  }
done:
  if (args != args_small) free(args);
  if (outs != outs_small) free(outs);
  return result;
}

/* compile(graph, precision) -> Executable */
static PyObject* py_compile(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* gobj;
  int precision = TPU_PRECISION_HIGHEST;
  if (!PyArg_ParseTuple(args, "O|i", &gobj, &precision)) return NULL;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_graph_t* g = tpu_py_graph_get(gobj);
  if (!g) return NULL;
  uint64_t t0 = tpu_now_ns();
  tpu_executable_t* exe = NULL;
  tpu_status_t st = tpu_executable_compile(tpu_py.device, g, (tpu_precision_t)precision, NULL, &exe);
  tpu_py.stats.compile_ns += tpu_now_ns() - t0;
  if (st) return tpu_py_raise(st);
  tpu_py.stats.compiles++;
  return tpu_py_executable_wrap(exe);
}

/* run(exe, params, site="") -> [outputs] */
static PyObject* py_run(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *eobj, *params;
  const char* site = "tpu op";
  if (!PyArg_ParseTuple(args, "OO|s", &eobj, &params, &site)) return NULL;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_executable_t* exe = tpu_py_executable_get(eobj);
  if (!exe) return NULL;
  PyObject* seq = PySequence_Fast(params, "params must be a sequence");
  if (!seq) return NULL;
  PyObject* r = tpu_py_run(exe, PySequence_Fast_ITEMS(seq), PySequence_Fast_GET_SIZE(seq), site);
  Py_DECREF(seq);
  return r;
}

PyMethodDef tpu_py_graph_methods[] = {
    {"compile", py_compile, METH_VARARGS, "compile(graph, precision) -> Executable"},
    {"run", py_run, METH_VARARGS, "run(exe, params, site) -> outputs"},
    {NULL, NULL, 0, NULL},
};

int tpu_py_graph_register(PyObject* m) {
  if (PyType_Ready(&TpuGraph_Type) < 0 || PyType_Ready(&TpuExecutable_Type) < 0) return -1;
  Py_INCREF(&TpuGraph_Type);
  if (PyModule_AddObject(m, "Graph", (PyObject*)&TpuGraph_Type) < 0) return -1;
  Py_INCREF(&TpuExecutable_Type);
  if (PyModule_AddObject(m, "Executable", (PyObject*)&TpuExecutable_Type) < 0) return -1;
  return 0;
}
