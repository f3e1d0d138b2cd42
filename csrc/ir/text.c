/* Verifier, text printer and parser.
 *
 * Text format, one node per line:
 *   %0 = parameter 0 buffer : f32[2,3] {strides=[3,1]}
 *   %1 = parameter 1 scalar : f32[]
 *   %2 = constant : f32[2] {data=0x0000803f00000040}
 *   %3 = add %0, %0 : f32[2,3]
 *   %4 = compare %3, %3 : i1[2,3] {kind=LT}
 *   %5 = reduce %3 : f32[2] {kind=sum, ints=[1]}
 *   %6 = convert %5 : bf16[2] {dtype=bf16}
 *   output %6 {strides=[1], alias=-1}
 * Every node states its result type, so parsing needs no inference; the
 * parser rebuilds through the builder, which re-checks everything.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir_impl.h"

/* ------------------------------------------------------------ verifier */

tpu_status_t tpu_graph_verify(const tpu_graph_t* g) {
  int32_t seen_params = 0;
  for (tpu_value_t v = 0; v < g->n_nodes; v++) {
    const tpu_node_t* n = &g->nodes[v];
    if ((unsigned)n->op >= TPU_OP_COUNT)
      return TPU_STATUS(INTERNAL, "node %%%d: invalid opcode", v);
    const tpu_op_info_t* info = tpu_op_info(n->op);
    for (int32_t i = 0; i < n->n_operands; i++) {
      tpu_value_t o = g->operands[n->operand_off + i];
      if (o < 0 || o >= v)
        return TPU_STATUS(INTERNAL, "node %%%d (%s): operand %d refers to %%%d, "
                          "not an earlier value", v, info->name, i, o);
    }
    if (n->op == TPU_OP_PARAMETER) {
      if (n->param_index < 0 || n->param_index >= g->n_params ||
          g->params[n->param_index] != v)
        return TPU_STATUS(INTERNAL, "node %%%d: parameter numbering broken", v);
      seen_params++;
      continue;
    }
    if (n->op == TPU_OP_CONSTANT) continue;
    tpu_attrs_t at = tpu_graph_node_attrs(g, v);
    TPU_RETURN_IF_ERROR_CTX(tpu_op_check_kind(n->op, at.kind), "node %%%d", v);
    tpu_dtype_t dt = n->dtype;
    tpu_shape_t sh = n->shape;
    tpu_infer_fn_t fn = tpu_op_infer_fn(n->op);
    TPU_RETURN_IF_ERROR_CTX(
        fn(g, n->op, g->operands + n->operand_off, n->n_operands, &at, true, &dt, &sh),
        "node %%%d", v);
  }
  if (seen_params != g->n_params)
    return TPU_STATUS(INTERNAL, "graph lists %d parameters but has %d parameter nodes",
                      g->n_params, seen_params);
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const tpu_output_t* o = &g->outputs[i];
    if (o->value < 0 || o->value >= g->n_nodes)
      return TPU_STATUS(INTERNAL, "output %d refers to no value", i);
    if (o->alias >= g->n_params)
      return TPU_STATUS(INTERNAL, "output %d aliases a missing parameter", i);
    for (int32_t j = 0; j < i; j++)
      if (o->alias >= 0 && g->outputs[j].alias == o->alias)
        return TPU_STATUS(INVALID_ARGUMENT, "outputs %d and %d alias the same parameter", j, i);
  }
  return NULL;
}

/* ------------------------------------------------------------- printer */

typedef struct {
  tpu_allocator_t a;
  char* buf;
  size_t len, cap;
  bool failed;
} sbuf_t;

static void sb_printf(sbuf_t* s, const char* fmt, ...) TPU_PRINTF(2, 3);
static void sb_printf(sbuf_t* s, const char* fmt, ...) {
  if (s->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->cap - s->len;
    int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      s->failed = true;
      return;
    }
    if (s->buf && (size_t)n < room) {
      s->len += (size_t)n;
      return;
    }
    size_t nc = s->cap ? s->cap * 2 : 256;
    while (nc < s->len + (size_t)n + 1) nc *= 2;
    char* p = tpu_realloc(s->a, s->buf, nc);
    if (!p) {
      s->failed = true;
      return;
    }
    s->buf = p;
    s->cap = nc;
  }
}

static void sb_ints(sbuf_t* s, const int64_t* v, int32_t n) {
  sb_printf(s, "[");
  for (int32_t i = 0; i < n; i++) sb_printf(s, i ? ",%lld" : "%lld", (long long)v[i]);
  sb_printf(s, "]");
}

static void sb_type(sbuf_t* s, tpu_dtype_t d, const tpu_shape_t* sh) {
  sb_printf(s, "%s", tpu_dtype_info(d)->name);
  sb_ints(s, sh->dims, sh->rank);
}

static const char* kind_text(tpu_opcode_t op, int32_t kind, char* tmp, size_t n) {
  switch (op) {
    case TPU_OP_COMPARE: return tpu_cmp_name((tpu_cmp_t)kind);
    case TPU_OP_REDUCE: return tpu_reduce_kind_name((tpu_reduce_kind_t)kind);
    case TPU_OP_DOT_GENERAL: return tpu_precision_name((tpu_precision_t)kind);
    case TPU_OP_RNG: return tpu_rng_dist_name((tpu_rng_dist_t)kind);
    case TPU_OP_CUMULATIVE:
    case TPU_OP_REDUCE_WINDOW: return tpu_reduce_kind_name((tpu_reduce_kind_t)kind);
    case TPU_OP_CONVOLUTION: return tpu_precision_name((tpu_precision_t)kind);
    default: snprintf(tmp, n, "%d", kind); return tmp;
  }
}

tpu_status_t tpu_graph_print(const tpu_graph_t* g, char** out) {
  *out = NULL;
  sbuf_t s = {g->allocator, NULL, 0, 0, false};
  sb_printf(&s, "graph {\n");
  for (tpu_value_t v = 0; v < g->n_nodes; v++) {
    const tpu_node_t* n = &g->nodes[v];
    const char* name = tpu_op_info(n->op)->name;
    sb_printf(&s, "  %%%d = %s", v, name);
    if (n->op == TPU_OP_PARAMETER) {
      sb_printf(&s, " %d %s : ", n->param_index,
                n->kind == TPU_PARAM_SCALAR ? "scalar" : "buffer");
      sb_type(&s, n->dtype, &n->shape);
      if (n->kind == TPU_PARAM_BUFFER) {
        sb_printf(&s, " {strides=");
        sb_ints(&s, g->ints + n->extra_off, n->shape.rank);
        sb_printf(&s, "}");
      }
      sb_printf(&s, "\n");
      continue;
    }
    for (int32_t i = 0; i < n->n_operands; i++)
      sb_printf(&s, i ? ", %%%d" : " %%%d", g->operands[n->operand_off + i]);
    sb_printf(&s, " : ");
    sb_type(&s, n->dtype, &n->shape);
    bool any = false;
    char tmp[32];
    if (n->op == TPU_OP_CONSTANT) {
      sb_printf(&s, " {data=0x");
      const uint8_t* p = g->blob + n->extra_off;
      int64_t nb = tpu_shape_numel(&n->shape) * tpu_dtype_size(n->dtype);
      for (int64_t i = 0; i < nb; i++) sb_printf(&s, "%02x", p[i]);
      any = true;
    }
    if (n->kind != 0 || n->op == TPU_OP_COMPARE || n->op == TPU_OP_REDUCE ||
        n->op == TPU_OP_DOT_GENERAL || n->op == TPU_OP_RNG || n->op == TPU_OP_CUMULATIVE ||
        n->op == TPU_OP_REDUCE_WINDOW || n->op == TPU_OP_CONVOLUTION) {
      sb_printf(&s, "%skind=%s", any ? ", " : " {", kind_text(n->op, n->kind, tmp, sizeof tmp));
      any = true;
    }
    if (n->op == TPU_OP_CONVERT) {
      sb_printf(&s, "%sdtype=%s", any ? ", " : " {", tpu_dtype_info(n->attr_dtype)->name);
      any = true;
    }
    if (n->n_ints) {
      sb_printf(&s, "%sints=", any ? ", " : " {");
      sb_ints(&s, g->ints + n->ints_off, n->n_ints);
      any = true;
    }
    sb_printf(&s, any ? "}\n" : "\n");
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const tpu_output_t* o = &g->outputs[i];
    sb_printf(&s, "  output %%%d {strides=", o->value);
    sb_ints(&s, g->ints + o->strides_off, g->nodes[o->value].shape.rank);
    sb_printf(&s, ", alias=%d}\n", o->alias);
  }
  sb_printf(&s, "}\n");
  if (s.failed) {
    tpu_free(g->allocator, s.buf);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "printing graph: host out of memory");
  }
  *out = s.buf;
  return NULL;
}

void tpu_graph_free_text(const tpu_graph_t* g, char* text) {
  tpu_free(g->allocator, text);
}

/* -------------------------------------------------------------- parser */

typedef struct {
  const char* p;
  int line;
} lex_t;

static void skip_ws(lex_t* l) {
  while (*l->p == ' ' || *l->p == '\t' || *l->p == '\r') l->p++;
}
static bool accept(lex_t* l, const char* tok) {
  skip_ws(l);
  size_t n = strlen(tok);
  if (strncmp(l->p, tok, n) == 0) {
    l->p += n;
    return true;
  }
  return false;
}
#define EXPECT(l, tok)                                                        \
  do {                                                                        \
    if (!accept((l), (tok)))                                                  \
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: expected '%s'", \
                        (l)->line, (tok));                                    \
  } while (0)

static tpu_status_t parse_int(lex_t* l, int64_t* out) {
  *out = 0;
  skip_ws(l);
  char* end;
  long long v = strtoll(l->p, &end, 10);
  if (end == l->p)
    return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: expected integer", l->line);
  l->p = end;
  *out = v;
  return NULL;
}

static tpu_status_t parse_word(lex_t* l, const char** w, size_t* n) {
  skip_ws(l);
  const char* s = l->p;
  while (isalnum((unsigned char)*l->p) || *l->p == '_' || *l->p == '<' ||
         *l->p == '>')
    l->p++;
  if (l->p == s)
    return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: expected a name", l->line);
  *w = s;
  *n = (size_t)(l->p - s);
  return NULL;
}

static tpu_status_t parse_ints(lex_t* l, int64_t* v, int32_t cap, int32_t* n) {
  EXPECT(l, "[");
  *n = 0;
  if (accept(l, "]")) return NULL;
  for (;;) {
    if (*n >= cap)
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: list too long", l->line);
    TPU_RETURN_IF_ERROR(parse_int(l, &v[(*n)++]));
    if (accept(l, "]")) return NULL;
    EXPECT(l, ",");
  }
}

static tpu_status_t parse_type(lex_t* l, tpu_dtype_t* d, tpu_shape_t* sh) {
  skip_ws(l);
  const char* s = l->p;
  while (*l->p && *l->p != '[') l->p++;
  TPU_RETURN_IF_ERROR(tpu_dtype_parse(s, (size_t)(l->p - s), d));
  memset(sh, 0, sizeof(*sh));
  return parse_ints(l, sh->dims, TPU_MAX_RANK, &sh->rank);
}

static tpu_status_t parse_kind(tpu_opcode_t op, const char* w, size_t n,
                               int32_t* kind) {
  const char* (*namer)(int) = NULL;
  int32_t count = 0;
  switch (op) {
    case TPU_OP_COMPARE: namer = (const char* (*)(int))tpu_cmp_name; count = TPU_CMP_COUNT; break;
    case TPU_OP_REDUCE: namer = (const char* (*)(int))tpu_reduce_kind_name; count = TPU_REDUCE_COUNT; break;
    case TPU_OP_DOT_GENERAL: namer = (const char* (*)(int))tpu_precision_name; count = TPU_PRECISION_COUNT; break;
    case TPU_OP_RNG: namer = (const char* (*)(int))tpu_rng_dist_name; count = TPU_RNG_COUNT; break;
    case TPU_OP_CUMULATIVE:
    case TPU_OP_REDUCE_WINDOW: namer = (const char* (*)(int))tpu_reduce_kind_name; count = TPU_REDUCE_COUNT; break;
    case TPU_OP_CONVOLUTION: namer = (const char* (*)(int))tpu_precision_name; count = TPU_PRECISION_COUNT; break;
    default: break;
  }
  for (int32_t k = 0; k < count; k++) {
    const char* nm = namer(k);
    if (strlen(nm) == n && memcmp(nm, w, n) == 0) {
      *kind = k;
      return NULL;
    }
  }
  char* end;
  long v = strtol(w, &end, 10);
  if (end == w + n) {
    *kind = (int32_t)v;
    return NULL;
  }
  return TPU_STATUS(INVALID_ARGUMENT, "unknown kind '%.*s' for %s", (int)n, w,
                    tpu_op_info(op)->name);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static tpu_status_t parse_line(tpu_graph_t* g, lex_t* l, tpu_value_t* map,
                               int32_t map_cap) {
  if (accept(l, "output")) {
    EXPECT(l, "%");
    int64_t v;
    TPU_RETURN_IF_ERROR(parse_int(l, &v));
    if (v < 0 || v >= map_cap || map[v] < 0)
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: unknown value %%%lld",
                        l->line, (long long)v);
    int64_t st[TPU_MAX_RANK];
    int32_t nst = 0;
    int64_t alias = -1;
    EXPECT(l, "{");
    EXPECT(l, "strides=");
    TPU_RETURN_IF_ERROR(parse_ints(l, st, TPU_MAX_RANK, &nst));
    EXPECT(l, ",");
    EXPECT(l, "alias=");
    TPU_RETURN_IF_ERROR(parse_int(l, &alias));
    EXPECT(l, "}");
    if (nst != tpu_graph_node_shape(g, map[v])->rank)
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: strides rank", l->line);
    return tpu_graph_add_output(g, map[v], st, (int32_t)alias);
  }
  EXPECT(l, "%");
  int64_t id;
  TPU_RETURN_IF_ERROR(parse_int(l, &id));
  if (id < 0 || id >= map_cap)
    return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: value id out of range", l->line);
  EXPECT(l, "=");
  const char* w;
  size_t wn;
  TPU_RETURN_IF_ERROR(parse_word(l, &w, &wn));
  tpu_opcode_t op;
  TPU_RETURN_IF_ERROR_CTX(tpu_op_from_name(w, wn, &op), "graph text line %d", l->line);
  tpu_value_t out;
  if (op == TPU_OP_PARAMETER) {
    int64_t idx;
    TPU_RETURN_IF_ERROR(parse_int(l, &idx));
    if (idx != tpu_graph_param_count(g))
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: parameters out of order", l->line);
    bool scalar = accept(l, "scalar");
    if (!scalar) EXPECT(l, "buffer");
    EXPECT(l, ":");
    tpu_dtype_t d;
    tpu_shape_t sh;
    TPU_RETURN_IF_ERROR(parse_type(l, &d, &sh));
    if (scalar) {
      TPU_RETURN_IF_ERROR(tpu_graph_add_scalar_parameter(g, d, &out));
    } else {
      int64_t st[TPU_MAX_RANK];
      int32_t nst;
      EXPECT(l, "{");
      EXPECT(l, "strides=");
      TPU_RETURN_IF_ERROR(parse_ints(l, st, TPU_MAX_RANK, &nst));
      EXPECT(l, "}");
      if (nst != sh.rank)
        return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: strides rank", l->line);
      TPU_RETURN_IF_ERROR(tpu_graph_add_parameter(g, d, &sh, st, &out));
    }
    map[id] = out;
    return NULL;
  }
  tpu_value_t operands[64];
  int32_t n_operands = 0;
  while (accept(l, "%")) {
    int64_t v;
    TPU_RETURN_IF_ERROR(parse_int(l, &v));
    if (v < 0 || v >= map_cap || map[v] < 0)
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: unknown value %%%lld",
                        l->line, (long long)v);
    if (n_operands >= 64)
      return TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: too many operands", l->line);
    operands[n_operands++] = map[v];
    if (!accept(l, ",")) break;
  }
  EXPECT(l, ":");
  tpu_dtype_t d;
  tpu_shape_t sh;
  TPU_RETURN_IF_ERROR(parse_type(l, &d, &sh));
  tpu_attrs_t at;
  memset(&at, 0, sizeof(at));
  int64_t ints[TPU_MAX_ATTR_INTS];
  uint8_t* data = NULL;
  tpu_status_t st = NULL;
  if (accept(l, "{")) {
    for (;;) {
      if (accept(l, "kind=")) {
        const char* kw;
        size_t kn;
        st = parse_word(l, &kw, &kn);
        if (!st) st = parse_kind(op, kw, kn, &at.kind);
      } else if (accept(l, "dtype=")) {
        skip_ws(l);
        const char* s = l->p;
        while (*l->p && *l->p != ',' && *l->p != '}' && *l->p != ' ') l->p++;
        st = tpu_dtype_parse(s, (size_t)(l->p - s), &at.dtype);
      } else if (accept(l, "ints=")) {
        st = parse_ints(l, ints, (int32_t)TPU_ARRAY_SIZE(ints), &at.n_ints);
        at.ints = ints;
      } else if (accept(l, "data=0x")) {
        int64_t nb = tpu_shape_numel(&sh) * tpu_dtype_size(d);
        data = tpu_alloc(g->allocator, (size_t)nb + 1);
        if (!data) return TPU_STATUS(RESOURCE_EXHAUSTED, "parsing constant");
        for (int64_t i = 0; i < nb && !st; i++) {
          int hi = hexval(l->p[0]), lo = hi < 0 ? -1 : hexval(l->p[1]);
          if (hi < 0 || lo < 0)
            st = TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: short constant", l->line);
          else
            data[i] = (uint8_t)(hi * 16 + lo);
          l->p += 2;
        }
      } else {
        st = TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: unknown attribute", l->line);
      }
      if (st) break;
      if (accept(l, "}")) break;
      if (!accept(l, ",")) {
        st = TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: expected ',' or '}'", l->line);
        break;
      }
    }
  }
  if (!st) {
    if (op == TPU_OP_CONSTANT) {
      if (!data)
        st = TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: constant without data", l->line);
      else
        st = tpu_graph_add_constant(g, d, &sh, data, &out);
    } else {
      st = tpu_graph_add_node_typed(g, op, operands, n_operands, &at, d, &sh, &out);
    }
  }
  tpu_free(g->allocator, data);
  if (st) return tpu_status_annotate(st, "graph text line %d", l->line);
  map[id] = out;
  return NULL;
}

tpu_status_t tpu_graph_parse(tpu_allocator_t a, const char* text,
                             tpu_graph_t** out) {
  *out = NULL;
  int32_t lines = 1;
  for (const char* c = text; *c; c++) lines += *c == '\n';
  tpu_value_t* map = tpu_alloc(a, sizeof(tpu_value_t) * (size_t)lines);
  if (!map) return TPU_STATUS(RESOURCE_EXHAUSTED, "parsing graph");
  for (int32_t i = 0; i < lines; i++) map[i] = -1;
  tpu_graph_t* g = NULL;
  tpu_status_t st = tpu_graph_create(a, &g);
  lex_t l = {text, 1};
  if (!st && !accept(&l, "graph"))
    st = TPU_STATUS(INVALID_ARGUMENT, "graph text: expected 'graph {'");
  if (!st && !accept(&l, "{"))
    st = TPU_STATUS(INVALID_ARGUMENT, "graph text: expected 'graph {'");
  while (!st) {
    skip_ws(&l);
    if (*l.p == '\n') {
      l.p++;
      l.line++;
      continue;
    }
    if (*l.p == '}') break;
    if (*l.p == 0) {
      st = TPU_STATUS(INVALID_ARGUMENT, "graph text: missing closing '}'");
      break;
    }
    st = parse_line(g, &l, map, lines);
    if (!st) {
      skip_ws(&l);
      if (*l.p != '\n' && *l.p != 0)
        st = TPU_STATUS(INVALID_ARGUMENT, "graph text line %d: trailing text", l.line);
    }
  }
  tpu_free(a, map);
  if (!st) st = tpu_graph_verify(g);
  if (st) {
    tpu_graph_destroy(g);
    return st;
  }
  *out = g;
  return NULL;
}
