/* redis_session._transport._speedups: the stored form of a message back into a Message, in C.
 *
 * decode(items) reads each element that is exactly what codec.encode_message writes (compact
 * JSON, its fields in the model's order, a timestamp "YYYY-MM-DDTHH:MM:SS[.ffffff]Z", plain tool
 * calls) and builds the frozen Message (and ToolCall) instances that pydantic's validation of
 * the codec's decode-only twin builds: the same field values and types, an equal fields set
 * (shared by the models decoded with the same fields, and unchangeable in place), the
 * timestamp in the tzinfo given to configure(). An element of any other form (another
 * writer's JSON, a signed tool call, bytes that are not JSON) is None in the returned list: the
 * codec validates those with pydantic, which also names the element that is not a message.
 * Nothing here accepts what validation would reject; tests/unit/test_decode_paths.py checks that
 * whatever decode returns equals what validation returns, for the encoder's every shape and
 * for damaged elements.
 *
 * It builds pydantic models without pydantic: it fills BaseModel's slots __pydantic_fields_set__,
 * __pydantic_extra__ and __pydantic_private__ in place (their member descriptors' offsets, which
 * configure() checks and refuses otherwise), shares one fields set per combination of fields and
 * takes the models out of the collector's tracking. That is a piece of the fast path: used only
 * when redis_session._transport.fast's check of this process's pydantic passed (the models it builds
 * compared with pydantic's own, field by field), else the codec validates with pydantic.
 * tools/fuzz_speedups.py fuzzes both entry points under AddressSanitizer and UBSan.
 *
 * Built by hatch_build.py when a C compiler is at hand; without it the codec decodes with
 * pydantic alone (same results, slower).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

static PyObject *roles;      /* {value: MessageRole member} */
static PyObject *msg_cls;    /* Message */
static PyObject *call_cls;   /* ToolCall */
static PyObject *usage_cls;  /* Usage */
static PyObject *tz;         /* the tzinfo of a decoded timestamp */
static PyObject *set_cls;    /* the class of the shared fields sets (see fields_set) */
static PyObject *msg_dict;   /* Message.__dict__ template: the fields in order */
static PyObject *call_dict;  /* ToolCall.__dict__ template */
static PyObject *usage_dict; /* Usage.__dict__ template */
static PyObject *s_id, *s_role, *s_content, *s_timestamp, *s_tool_calls, *s_author, *s_tokens,
    *s_usage;
static PyObject *s_name, *s_input, *s_output, *s_thought;
static PyObject *s_input_tokens, *s_output_tokens, *s_requests;
static PyObject *s_fields_set, *s_extra, *s_private;
/* The offsets of BaseModel's slots __pydantic_fields_set__, __pydantic_extra__ and
 * __pydantic_private__ in a Message and in a ToolCall (configure() refuses classes where
 * they are not such slots: redis_session._transport.fast then leaves decoding to pydantic). */
static Py_ssize_t msg_slots[3] = {-1, -1, -1}, call_slots[3] = {-1, -1, -1},
                  usage_slots[3] = {-1, -1, -1};
/* The fields sets a Message and a ToolCall may have, by the bit mask of their fields, shared
 * (see fields_set): made when first needed, dropped by configure(). */
#define FIELD_BITS 8
static PyObject *msg_sets[1 << FIELD_BITS], *call_sets[1 << FIELD_BITS],
    *usage_sets[1 << FIELD_BITS];

#define OK 1
#define OTHER 0 /* not the encoder's form: the caller validates it */
#define ERROR -1

typedef struct {
    const char *p;
    const char *end;
} Cursor;

static int literal(Cursor *c, const char *text, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, text, n) != 0) return 0;
    c->p += n;
    return 1;
}
#define LIT(c, s) literal((c), (s), (Py_ssize_t)(sizeof(s) - 1))

static int hex4(const char *p, unsigned int *out) {
    unsigned int v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= (unsigned int)(h - '0');
        else if (h >= 'a' && h <= 'f') v |= (unsigned int)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= (unsigned int)(h - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static char *utf8(char *w, unsigned int cp) {
    if (cp < 0x80) {
        *w++ = (char)cp;
    } else if (cp < 0x800) {
        *w++ = (char)(0xC0 | (cp >> 6));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | (cp >> 12));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *w++ = (char)(0xF0 | (cp >> 18));
        *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *w++ = (char)(0x80 | (cp & 0x3F));
    }
    return w;
}

/* Text as a new str: UTF-8 strictly (OTHER for bytes that are not, or a surrogate). */
static int text(const char *p, Py_ssize_t n, PyObject **out) {
    *out = PyUnicode_DecodeUTF8(p, n, NULL);
    if (*out != NULL) return OK;
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return OTHER;
    }
    return ERROR;
}

/* Whether any byte of v is below 0x20, a quote or a backslash (bytes of UTF-8 sequences, 0x80
 * and above, are none of these). */
static inline int special(uint64_t v) {
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t quote = v ^ (ones * '"'), backslash = v ^ (ones * '\\');
    uint64_t below = (v - ones * 0x20) & ~v;
    return ((below | ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash)) & highs) != 0;
}

/* A JSON string at the cursor (its opening quote) as a new str. OTHER for anything JSON
 * forbids in a string (a raw control character, an unknown escape) and for a lone surrogate
 * escape, which the codec leaves to validation. */
static int string(Cursor *c, PyObject **out) {
    if (c->p >= c->end || *c->p != '"') return OTHER;
    const char *start = ++c->p, *p = start;
    int escaped = 0;
    uint64_t word;
    while (c->end - p >= 8) { /* eight bytes at a time up to the first that may end the run */
        memcpy(&word, p, 8);
        if (special(word)) break;
        p += 8;
    }
    while (p < c->end) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') break;
        if (ch < 0x20) return OTHER;
        if (ch == '\\') {
            escaped = 1;
            p++;
            if (p >= c->end) return OTHER;
        }
        p++;
    }
    if (p >= c->end) return OTHER;
    c->p = p + 1;
    if (!escaped) return text(start, p - start, out);
    char *buf = PyMem_Malloc((size_t)(p - start));
    if (buf == NULL) {
        PyErr_NoMemory();
        return ERROR;
    }
    char *w = buf;
    const char *r = start;
    while (r < p) {
        if (*r != '\\') {
            *w++ = *r++;
            continue;
        }
        r++;
        switch (*r++) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned int cp, low;
            if (p - r < 4 || !hex4(r, &cp)) goto other;
            r += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) goto other;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p - r < 6 || r[0] != '\\' || r[1] != 'u' || !hex4(r + 2, &low)) goto other;
                if (low < 0xDC00 || low > 0xDFFF) goto other;
                r += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            w = utf8(w, cp);
            break;
        }
        default: goto other;
        }
    }
    int status = text(buf, w - buf, out);
    PyMem_Free(buf);
    return status;
other:
    PyMem_Free(buf);
    return OTHER;
}

static int digits(const char *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 1;
}

/* "YYYY-MM-DDTHH:MM:SS[.ffffff]Z" (with its quotes) as a new aware datetime. OTHER for any
 * other form or a date that does not exist: validation says what it makes of those. */
static int timestamp(Cursor *c, PyObject **out) {
    const char *s = c->p + 1;
    Py_ssize_t n;
    if (c->end - c->p >= 22 && c->p[0] == '"' && c->p[20] == 'Z' && c->p[21] == '"') n = 20;
    else if (c->end - c->p >= 29 && c->p[0] == '"' && c->p[27] == 'Z' && c->p[28] == '"') n = 27;
    else return OTHER;
    int y, mo, d, h, mi, se, us = 0;
    if (s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') return OTHER;
    if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) || !digits(s + 8, 2, &d) ||
        !digits(s + 11, 2, &h) || !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &se))
        return OTHER;
    if (n == 27 && (s[19] != '.' || !digits(s + 20, 6, &us))) return OTHER;
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || se > 59) return OTHER;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > month_days[mo - 1] + (mo == 2 && leap)) return OTHER;
    *out = PyDateTimeAPI->DateTime_FromDateAndTime(y, mo, d, h, mi, se, us, tz,
                                                   PyDateTimeAPI->DateTimeType);
    if (*out == NULL) return ERROR;
    c->p += n + 2;
    return OK;
}

/* A model instance holding dict as its fields, as pydantic-core builds a validated one.
 *
 * The instance, its __dict__ and its fields set are left out of the cyclic garbage collector.
 * The dict holds strings, a role member, a timestamp, a tuple of tool calls (models made here,
 * the tuple and they untracked too), none of which leads back to it, and CPython tracks a
 * dict again when a value that can be in a cycle is stored in it; the fields set (shared, see
 * fields_set) holds field names and refuses changes. The models are
 * frozen: only a caller that stores into one past that (object.__setattr__) an object that
 * refers back to it makes a cycle, which is then never
 * collected (a leak under such misuse only; refcounting frees every model as before). Taken
 * for what the collector costs otherwise: a read of 300 messages makes ~900 tracked objects,
 * each walked by every collection while young, and a worker's read cache keeps thousands of
 * models that every full collection walks (docs/benchmarks.md, "Figures behind the code").
 * From Python 3.14 on, where dicts may no longer be tracked
 * again on their own, nothing is untracked. */
static PyObject *instance(PyObject *cls, PyObject *dict, PyObject *fields) {
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) return NULL;
    const Py_ssize_t *slots = cls == msg_cls ? msg_slots : cls == call_cls ? call_slots : usage_slots;
    if (PyObject_GenericSetDict(obj, dict, NULL) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    /* the slots of a fresh instance are NULL: filled in place */
    *(PyObject **)((char *)obj + slots[0]) = Py_NewRef(fields);
    *(PyObject **)((char *)obj + slots[1]) = Py_NewRef(Py_None);
    *(PyObject **)((char *)obj + slots[2]) = Py_NewRef(Py_None);
#if PY_VERSION_HEX < 0x030E0000
    if (PyObject_GC_IsTracked(dict)) PyObject_GC_UnTrack(dict);
    if (PyObject_GC_IsTracked(fields)) PyObject_GC_UnTrack(fields);
    if (PyObject_GC_IsTracked(obj)) PyObject_GC_UnTrack(obj);
#endif
    return obj;
}

/* Set dict[key] = value (a new reference, stolen) and mark field bit in *fields. */
static int field(PyObject *dict, unsigned *fields, unsigned bit, PyObject *key, PyObject *value) {
    int failed = PyDict_SetItem(dict, key, value) < 0;
    Py_DECREF(value);
    *fields |= bit;
    return failed ? ERROR : OK;
}

/* The fields set of a model whose fields set are the bits of mask (bit i: names[i]): one
 * instance of set_cls (a set that refuses to be changed in place and copies as a plain set)
 * per mask, made when first needed and shared by every model decoded with those fields: a
 * set of its own per model (made and freed with it, or copied from a template) is an
 * allocation per message that decoding does not need. */
static PyObject *fields_set(PyObject **shared, PyObject *const *names, unsigned mask) {
    if (shared[mask] == NULL) {
        PyObject *list = PyList_New(0);
        if (list == NULL) return NULL;
        for (int i = 0; i < FIELD_BITS; i++) {
            if ((mask & (1u << i)) && PyList_Append(list, names[i]) < 0) {
                Py_DECREF(list);
                return NULL;
            }
        }
        shared[mask] = PyObject_CallOneArg(set_cls, list);
        Py_DECREF(list);
        if (shared[mask] == NULL) return NULL;
    }
    return Py_NewRef(shared[mask]);
}

#define OTHERWISE                                                                                \
    do {                                                                                         \
        status = OTHER;                                                                          \
        goto done;                                                                               \
    } while (0)
#define EXPECT(c, s)                                                                             \
    do {                                                                                         \
        if (!LIT((c), s)) OTHERWISE;                                                             \
    } while (0)
#define STEP(expr)                                                                               \
    do {                                                                                         \
        status = (expr);                                                                         \
        if (status != OK) goto done;                                                             \
    } while (0)
#define STRING_FIELD(dict, fields, bit, key)                                                     \
    do {                                                                                         \
        PyObject *value_;                                                                        \
        STEP(string(c, &value_));                                                                \
        STEP(field((dict), (fields), (bit), (key), value_));                                     \
    } while (0)

/* {"id":S,"name":S,"input":S[,"output":S][,"thought":true|false]} as a new ToolCall. */
static int tool_call(Cursor *c, PyObject **out) {
    int status = OTHER;
    unsigned mask = 0;
    PyObject *dict = PyDict_Copy(call_dict), *fields = NULL;
    if (dict == NULL) return ERROR;
    EXPECT(c, "{\"id\":");
    STRING_FIELD(dict, &mask, 1, s_id);
    EXPECT(c, ",\"name\":");
    STRING_FIELD(dict, &mask, 2, s_name);
    EXPECT(c, ",\"input\":");
    STRING_FIELD(dict, &mask, 4, s_input);
    if (LIT(c, ",\"output\":")) STRING_FIELD(dict, &mask, 8, s_output);
    if (LIT(c, ",\"thought\":")) {
        PyObject *flag = LIT(c, "true") ? Py_True : LIT(c, "false") ? Py_False : NULL;
        if (flag == NULL) OTHERWISE;
        STEP(field(dict, &mask, 16, s_thought, Py_NewRef(flag)));
    }
    EXPECT(c, "}");
    PyObject *const names[FIELD_BITS] = {s_id, s_name, s_input, s_output, s_thought};
    fields = fields_set(call_sets, names, mask);
    if (fields == NULL) {
        status = ERROR;
        goto done;
    }
    *out = instance(call_cls, dict, fields);
    status = *out == NULL ? ERROR : OK;
done:
    Py_XDECREF(dict);
    Py_XDECREF(fields);
    return status;
}

/* The tool calls' array (after its '[') as a new tuple. */
static int tool_calls(Cursor *c, PyObject **out) {
    PyObject *calls = PyList_New(0), *call = NULL;
    int status = OTHER;
    if (calls == NULL) return ERROR;
    if (!LIT(c, "]")) {
        do {
            STEP(tool_call(c, &call));
            int failed = PyList_Append(calls, call) < 0;
            Py_DECREF(call);
            if (failed) {
                status = ERROR;
                goto done;
            }
        } while (LIT(c, ","));
        EXPECT(c, "]");
    }
    *out = PyList_AsTuple(calls);
    status = *out == NULL ? ERROR : OK;
#if PY_VERSION_HEX < 0x030E0000
    /* Of models left out of the collector (see instance): a collection untracks a tuple only
     * when what it holds is not a kind of object that may be tracked. */
    if (status == OK && PyObject_GC_IsTracked(*out)) PyObject_GC_UnTrack(*out);
#endif
done:
    Py_DECREF(calls);
    return status;
}

/* A token count at the cursor (a JSON integer, 0 to 2^40 as Message.tokens allows, without a
 * sign, a leading zero, a fraction or an exponent) as a new int; OTHER for anything else,
 * which validation accepts or refuses. */
#define MAX_TOKENS 1099511627776LL
static int count(Cursor *c, PyObject **out) {
    const char *p = c->p;
    long long v = 0;
    int n = 0;
    while (p < c->end && *p >= '0' && *p <= '9' && n < 14) {
        v = v * 10 + (*p - '0');
        p++;
        n++;
    }
    if (n == 0 || n > 13 || (n > 1 && c->p[0] == '0') || v > MAX_TOKENS) return OTHER;
    if (p < c->end && (*p == '.' || *p == 'e' || *p == 'E')) return OTHER;
    *out = PyLong_FromLongLong(v);
    if (*out == NULL) return ERROR;
    c->p = p;
    return OK;
}

/* A message's usage after its '{': {["input_tokens":N][,"output_tokens":N][,"requests":N]} (the
 * figures not 0, in field order, as the encoder writes them) as a new Usage. */
static int usage(Cursor *c, PyObject **out) {
    int status = OTHER;
    unsigned mask = 0;
    PyObject *dict = PyDict_Copy(usage_dict), *fields = NULL, *value;
    if (dict == NULL) return ERROR;
    PyObject *const names[FIELD_BITS] = {s_input_tokens, s_output_tokens, s_requests};
    /* Each name as the first (no comma before it) and as a later one. */
    static const char *const keys[2][3] = {
        {"\"input_tokens\":", "\"output_tokens\":", "\"requests\":"},
        {",\"input_tokens\":", ",\"output_tokens\":", ",\"requests\":"}};
    for (int i = 0; i < 3; i++) {
        const char *key = keys[mask ? 1 : 0][i];
        if (!literal(c, key, (Py_ssize_t)strlen(key))) continue; /* 0: not written */
        STEP(count(c, &value));
        STEP(field(dict, &mask, 1u << i, names[i], value));
    }
    EXPECT(c, "}"); /* anything else (names out of order, unknown ones): validation's */
    fields = fields_set(usage_sets, names, mask);
    if (fields == NULL) {
        status = ERROR;
        goto done;
    }
    *out = instance(usage_cls, dict, fields);
    status = *out == NULL ? ERROR : OK;
done:
    Py_XDECREF(dict);
    Py_XDECREF(fields);
    return status;
}

/* One stored element (the n bytes at p) as a new Message (OK), OTHER, or ERROR with an
 * exception set. */
static int message_at(const char *p, Py_ssize_t n, PyObject **out) {
    Cursor cursor = {p, p + n};
    Cursor *c = &cursor;
    int status = OTHER;
    unsigned mask = 0;
    PyObject *dict = PyDict_Copy(msg_dict), *fields = NULL, *role = NULL, *value;
    if (dict == NULL) return ERROR;
    EXPECT(c, "{\"id\":");
    STRING_FIELD(dict, &mask, 1, s_id);
    if (LIT(c, ",\"tokens\":")) {
        STEP(count(c, &value));
        STEP(field(dict, &mask, 64, s_tokens, value));
    }
    EXPECT(c, ",\"role\":");
    STEP(string(c, &role));
    PyObject *member = PyDict_GetItemWithError(roles, role);
    if (member == NULL) {
        status = PyErr_Occurred() ? ERROR : OTHER;
        goto done;
    }
    STEP(field(dict, &mask, 2, s_role, Py_NewRef(member)));
    if (LIT(c, ",\"content\":")) STRING_FIELD(dict, &mask, 4, s_content);
    EXPECT(c, ",\"timestamp\":");
    STEP(timestamp(c, &value));
    STEP(field(dict, &mask, 8, s_timestamp, value));
    if (LIT(c, ",\"tool_calls\":[")) {
        STEP(tool_calls(c, &value));
        STEP(field(dict, &mask, 16, s_tool_calls, value));
    }
    if (LIT(c, ",\"author\":")) STRING_FIELD(dict, &mask, 32, s_author);
    if (LIT(c, ",\"usage\":{")) {
        STEP(usage(c, &value));
        STEP(field(dict, &mask, 128, s_usage, value));
    }
    EXPECT(c, "}");
    if (c->p != c->end) OTHERWISE;
    PyObject *const names[FIELD_BITS] = {s_id, s_role, s_content, s_timestamp, s_tool_calls,
                                         s_author, s_tokens, s_usage};
    fields = fields_set(msg_sets, names, mask);
    if (fields == NULL) {
        status = ERROR;
        goto done;
    }
    *out = instance(msg_cls, dict, fields);
    status = *out == NULL ? ERROR : OK;
done:
    Py_XDECREF(dict);
    Py_XDECREF(fields);
    Py_XDECREF(role);
    return status;
}

static int message(PyObject *raw, PyObject **out) {
    if (!PyBytes_CheckExact(raw)) return OTHER;
    return message_at(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), out);
}

static PyObject *decode(PyObject *self, PyObject *items) {
    if (msg_cls == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.configure() was not called");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(items, "decode() takes a sequence of stored elements");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), size = 0;
    PyObject *out = PyList_New(n), *left = PyList_New(0);
    if (out == NULL || left == NULL) goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = NULL, *item = PySequence_Fast_GET_ITEM(seq, i);
        if (PyBytes_CheckExact(item)) size += PyBytes_GET_SIZE(item);
        int status = message(item, &msg);
        if (status == ERROR) goto error;
        if (status == OTHER) {
            PyObject *at = PyLong_FromSsize_t(i);
            if (at == NULL) goto error;
            int failed = PyList_Append(left, at) < 0;
            Py_DECREF(at);
            if (failed) goto error;
            msg = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(out, i, msg);
    }
    Py_DECREF(seq);
    return Py_BuildValue("(NNn)", out, left, size);
error:
    Py_XDECREF(out);
    Py_XDECREF(left);
    Py_DECREF(seq);
    return NULL;
}

static PyObject *template(PyObject *const *names, Py_ssize_t n, PyObject *defaults) {
    PyObject *dict = PyDict_New();
    if (dict == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyDict_GetItemWithError(defaults, names[i]);
        if (value == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "no default for %R", names[i]);
            Py_DECREF(dict);
            return NULL;
        }
        if (PyDict_SetItem(dict, names[i], value) < 0) {
            Py_DECREF(dict);
            return NULL;
        }
    }
    return dict;
}

/* The offsets of cls's object slots names[0..2] in out: each must be a member descriptor of
 * type T_OBJECT_EX within the instance, and instances must have a __dict__ (TypeError
 * otherwise: the layout is not the one this module writes). */
static int slot_offsets(PyObject *cls, PyObject *const *names, Py_ssize_t *out) {
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_dictoffset == 0) {
        PyErr_Format(PyExc_TypeError, "%R instances have no __dict__", cls);
        return ERROR;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *d = PyObject_GetAttr(cls, names[i]);
        if (d == NULL) return ERROR;
        int slot = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                   ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        Py_ssize_t offset = slot ? ((PyMemberDescrObject *)d)->d_member->offset : -1;
        Py_DECREF(d);
        if (offset < (Py_ssize_t)sizeof(PyObject) ||
            offset > type->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
            PyErr_Format(PyExc_TypeError, "%R.%U is not an object slot", cls, names[i]);
            return ERROR;
        }
        out[i] = offset;
    }
    return OK;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *r, *m, *t, *z, *md, *cd, *fs, *u, *ud;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!O!O!O!O!:configure", &PyDict_Type, &r, &PyType_Type,
                          &m, &PyType_Type, &t, &z, &PyDict_Type, &md, &PyDict_Type, &cd,
                          &PyType_Type, &fs, &PyType_Type, &u, &PyDict_Type, &ud))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)fs, &PySet_Type)) {
        PyErr_SetString(PyExc_TypeError, "configure(): the fields set class must be a set");
        return NULL;
    }
    /* Checked before anything changes: a refused configure() leaves the module as it was. */
    PyObject *const slot_names[] = {s_fields_set, s_extra, s_private};
    Py_ssize_t new_msg_slots[3], new_call_slots[3], new_usage_slots[3];
    if (slot_offsets(m, slot_names, new_msg_slots) < 0 ||
        slot_offsets(t, slot_names, new_call_slots) < 0 ||
        slot_offsets(u, slot_names, new_usage_slots) < 0)
        return NULL;
    if (u == m || u == t) {
        PyErr_SetString(PyExc_TypeError, "configure(): the usage class is another model's");
        return NULL;
    }
    PyObject *const message_names[] = {s_id,           s_tokens, s_role,  s_content,
                                       s_timestamp,    s_tool_calls, s_author, s_usage};
    PyObject *const call_names[] = {s_id, s_name, s_input, s_output, s_thought,
                                    PyUnicode_InternFromString("thought_signature")};
    if (call_names[5] == NULL) return NULL;
    PyObject *const usage_names[] = {s_input_tokens, s_output_tokens, s_requests};
    PyObject *new_msg = template(message_names, 8, md), *new_call = template(call_names, 6, cd);
    PyObject *new_usage = template(usage_names, 3, ud);
    Py_DECREF(call_names[5]);
    if (new_msg == NULL || new_call == NULL || new_usage == NULL) {
        Py_XDECREF(new_msg);
        Py_XDECREF(new_call);
        Py_XDECREF(new_usage);
        return NULL;
    }
    Py_XSETREF(msg_dict, new_msg);
    Py_XSETREF(call_dict, new_call);
    Py_XSETREF(usage_dict, new_usage);
    Py_XSETREF(usage_cls, Py_NewRef(u));
    Py_XSETREF(roles, Py_NewRef(r));
    Py_XSETREF(msg_cls, Py_NewRef(m));
    Py_XSETREF(call_cls, Py_NewRef(t));
    Py_XSETREF(tz, Py_NewRef(z));
    Py_XSETREF(set_cls, Py_NewRef(fs));
    for (int i = 0; i < (1 << FIELD_BITS); i++) {
        Py_CLEAR(msg_sets[i]);
        Py_CLEAR(call_sets[i]);
        Py_CLEAR(usage_sets[i]);
    }
    memcpy(msg_slots, new_msg_slots, sizeof(msg_slots));
    memcpy(call_slots, new_call_slots, sizeof(call_slots));
    memcpy(usage_slots, new_usage_slots, sizeof(usage_slots));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O,
     "decode(items) -> (messages, left, size): each stored element as a Message, None where "
     "it is not in the encoder's form, the positions of those (ascending), and the bytes of "
     "the elements that are bytes."},
    {"configure", configure, METH_VARARGS,
     "configure(roles, message_cls, tool_call_cls, tzinfo, message_defaults, call_defaults, "
     "fields_set_cls, usage_cls, usage_defaults)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
#define INTERN(var, text)                                                                        \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_id, "id");
    INTERN(s_role, "role");
    INTERN(s_content, "content");
    INTERN(s_timestamp, "timestamp");
    INTERN(s_tool_calls, "tool_calls");
    INTERN(s_author, "author");
    INTERN(s_tokens, "tokens");
    INTERN(s_usage, "usage");
    INTERN(s_name, "name");
    INTERN(s_input, "input");
    INTERN(s_output, "output");
    INTERN(s_thought, "thought");
    INTERN(s_input_tokens, "input_tokens");
    INTERN(s_output_tokens, "output_tokens");
    INTERN(s_requests, "requests");
    INTERN(s_fields_set, "__pydantic_fields_set__");
    INTERN(s_extra, "__pydantic_extra__");
    INTERN(s_private, "__pydantic_private__");
    return PyModule_Create(&module);
}
