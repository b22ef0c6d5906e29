/* Part of opmarket's C-ABI host (_capi_host.h): loading a library. dlopen it, run its
 * OPM_InitPlugin with the host's table, and record each op and kernel it registers (checked
 * by opmarket's parser through a Python callback) with a handle for the bridges. */
#include "_capi_host.h" /* Python.h first */

#include <dlfcn.h>

/* --- loading: what a plugin's init registers ------------------------------------------- */
typedef struct {
  PyObject* check; /* (kind, declaration) -> None or a message */
  PyObject* ops;
  PyObject* kernels;
} Session;

static Session* session = NULL;

struct OPM_OpDefinitionBuilder {
  PyObject* decl;
};
struct OPM_KernelBuilder {
  PyObject* decl;
};

static int append_str(PyObject* decl, const char* key, const char* value) {
  PyObject* list = PyDict_GetItemString(decl, key);
  PyObject* s = PyUnicode_DecodeUTF8(value ? value : "", strlen(value ? value : ""), "replace");
  if (!list || !s) {
    Py_XDECREF(s);
    PyErr_Clear();
    return -1;
  }
  int r = PyList_Append(list, s);
  Py_DECREF(s);
  if (r < 0) PyErr_Clear();
  return r;
}

static void set_item(PyObject* decl, const char* key, PyObject* value) {
  if (!value || PyDict_SetItemString(decl, key, value) < 0) PyErr_Clear();
  Py_XDECREF(value);
}

OPM_OpDefinitionBuilder* h_NewOpDefinitionBuilder(const char* name) {
  OPM_OpDefinitionBuilder* b = (OPM_OpDefinitionBuilder*)calloc(1, sizeof *b);
  if (!b) return NULL;
  b->decl = Py_BuildValue("{s:s,s:[],s:[],s:[],s:s,s:{},s:O}", "name", name ? name : "",
                          "inputs", "outputs", "attrs", "doc", "", "flags", "shape_fn",
                          Py_None);
  if (!b->decl) {
    PyErr_Clear();
    free(b);
    return NULL;
  }
  return b;
}
void h_AddInput(OPM_OpDefinitionBuilder* b, const char* spec) {
  if (b) append_str(b->decl, "inputs", spec);
}
void h_AddOutput(OPM_OpDefinitionBuilder* b, const char* spec) {
  if (b) append_str(b->decl, "outputs", spec);
}
void h_AddAttr(OPM_OpDefinitionBuilder* b, const char* spec) {
  if (b) append_str(b->decl, "attrs", spec);
}
void h_SetDoc(OPM_OpDefinitionBuilder* b, const char* doc) {
  if (b) set_item(b->decl, "doc", PyUnicode_DecodeUTF8(doc ? doc : "", strlen(doc ? doc : ""),
                                                       "replace"));
}
void h_SetFlag(OPM_OpDefinitionBuilder* b, int flag, int value) {
  if (!b) return;
  PyObject* flags = PyDict_GetItemString(b->decl, "flags");
  PyObject* key = PyLong_FromLong(flag);
  if (flags && key && PyDict_SetItem(flags, key, value ? Py_True : Py_False) < 0) PyErr_Clear();
  Py_XDECREF(key);
}
void h_SetShapeFn(OPM_OpDefinitionBuilder* b, OPM_ShapeInferenceFn fn) {
  if (b) set_item(b->decl, "shape_fn", PyLong_FromVoidPtr((void*)fn));
}
void h_DeleteOpDefinitionBuilder(OPM_OpDefinitionBuilder* b) {
  if (!b) return;
  Py_XDECREF(b->decl);
  free(b);
}

/* 1 when the declaration was accepted; else the status says why not. */
static int register_decl(const char* kind, PyObject* decl, int is_op, OPM_Status* status) {
  if (!session) {
    h_SetStatus(status, OPM_FAILED_PRECONDITION,
                "ops and kernels can only be registered while opmarket loads the library");
    return 0;
  }
  PyObject* found = PyObject_CallFunction(session->check, "sO", kind, decl);
  if (!found) {
    status_from_python(status, OPM_INTERNAL, "registration");
    return 0;
  }
  if (found != Py_None) {
    const char* msg = PyUnicode_Check(found) ? utf8(found) : "refused";
    h_SetStatus(status, OPM_INVALID_ARGUMENT, msg ? msg : "refused");
    Py_DECREF(found);
    PyErr_Clear();
    return 0;
  }
  Py_DECREF(found);
  if (PyList_Append(is_op ? session->ops : session->kernels, decl) < 0) {
    status_from_python(status, OPM_INTERNAL, "registration");
    return 0;
  }
  h_SetStatus(status, OPM_OK, "");
  return 1;
}


/* The handle of an accepted op's shape function (None: it has none); NULL on failure. */
static PyObject* new_shape_fn(PyObject* decl) {
  PyObject* fn = PyDict_GetItemString(decl, "shape_fn");
  if (!fn || fn == Py_None) return Py_NewRef(Py_None);
  const char* name = utf8(PyDict_GetItemString(decl, "name"));
  OPMB_ShapeFn* f = (OPMB_ShapeFn*)calloc(1, sizeof *f);
  if (f && name) {
    f->fn = (OPM_ShapeInferenceFn)PyLong_AsVoidPtr(fn);
    f->name = strdup(name);
  }
  if (!f || !f->name || !f->fn || PyErr_Occurred()) {
    PyErr_Clear();
    if (f) free(f->name);
    free(f);
    return NULL;
  }
  return PyLong_FromVoidPtr(f);
}

void h_RegisterOpDefinition(OPM_OpDefinitionBuilder* b, OPM_Status* status) {
  if (!b) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "no op definition builder");
    return;
  }
  if (register_decl("op", b->decl, 1, status)) {
    PyObject* handle = new_shape_fn(b->decl);
    if (handle) set_item(b->decl, "shape_handle", handle);
    else h_SetStatus(status, OPM_RESOURCE_EXHAUSTED, "cannot record the shape function");
  }
  h_DeleteOpDefinitionBuilder(b);
}

OPM_KernelBuilder* h_NewKernelBuilder(const char* op, const char* device,
                                             OPM_KernelCreateFn create,
                                             OPM_KernelComputeFn compute,
                                             OPM_KernelDeleteFn del) {
  OPM_KernelBuilder* b = (OPM_KernelBuilder*)calloc(1, sizeof *b);
  if (!b) return NULL;
  b->decl = Py_BuildValue("{s:s,s:s,s:N,s:N,s:N,s:{},s:[],s:i,s:s,s:s}", "op", op ? op : "",
                          "device", device ? device : "CPU",
                          "create", PyLong_FromVoidPtr((void*)create),
                          "compute", PyLong_FromVoidPtr((void*)compute),
                          "delete", PyLong_FromVoidPtr((void*)del),
                          "constraints", "host_memory", "priority", 0, "label", "",
                          "name", "");
  if (!b->decl) {
    PyErr_Clear();
    free(b);
    return NULL;
  }
  return b;
}
void h_TypeConstraint(OPM_KernelBuilder* b, const char* attr, OPM_DataType dtype,
                             OPM_Status* status) {
  if (!b || !attr) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "type constraint without a builder or attr");
    return;
  }
  PyObject* cons = PyDict_GetItemString(b->decl, "constraints");
  PyObject* list = PyDict_GetItemString(cons, attr);
  if (!list) {
    list = PyList_New(0);
    if (!list || PyDict_SetItemString(cons, attr, list) < 0) {
      Py_XDECREF(list);
      status_from_python(status, OPM_INTERNAL, "type constraint");
      return;
    }
    Py_DECREF(list);
  }
  PyObject* n = PyLong_FromLong(dtype);
  if (!n || PyList_Append(list, n) < 0) {
    Py_XDECREF(n);
    status_from_python(status, OPM_INTERNAL, "type constraint");
    return;
  }
  Py_DECREF(n);
  h_SetStatus(status, OPM_OK, "");
}
void h_HostMemory(OPM_KernelBuilder* b, const char* arg) {
  if (b) append_str(b->decl, "host_memory", arg);
}
void h_Priority(OPM_KernelBuilder* b, int32_t priority) {
  if (b) set_item(b->decl, "priority", PyLong_FromLong(priority));
}
void h_Label(OPM_KernelBuilder* b, const char* label) {
  if (b) set_item(b->decl, "label", PyUnicode_FromString(label ? label : ""));
}
void h_DeleteKernelBuilder(OPM_KernelBuilder* b) {
  if (!b) return;
  Py_XDECREF(b->decl);
  free(b);
}

static OPMB_Kernel* new_kernel(PyObject* decl) {
  PyObject* create = PyDict_GetItemString(decl, "create");
  PyObject* compute = PyDict_GetItemString(decl, "compute");
  PyObject* del = PyDict_GetItemString(decl, "delete");
  PyObject* name = PyUnicode_FromFormat("%S (kernel %S)", PyDict_GetItemString(decl, "op"),
                                        PyDict_GetItemString(decl, "name"));
  const char* text = utf8(name);
  OPMB_Kernel* k = (OPMB_Kernel*)calloc(1, sizeof *k);
  if (k && text && create && compute && del) {
    k->create = (OPM_KernelCreateFn)PyLong_AsVoidPtr(create);
    k->compute = (OPM_KernelComputeFn)PyLong_AsVoidPtr(compute);
    k->del = (OPM_KernelDeleteFn)PyLong_AsVoidPtr(del);
    k->name = strdup(text);
  }
  Py_XDECREF(name);
  if (!k || !k->name || PyErr_Occurred()) {
    PyErr_Clear();
    if (k) free(k->name);
    free(k);
    return NULL;
  }
  return k;
}

void h_RegisterKernelBuilder(const char* name, OPM_KernelBuilder* b,
                                    OPM_Status* status) {
  if (!b) {
    h_SetStatus(status, OPM_INVALID_ARGUMENT, "no kernel builder");
    return;
  }
  set_item(b->decl, "name", PyUnicode_FromString(name ? name : ""));
  if (register_decl("kernel", b->decl, 0, status)) {
    OPMB_Kernel* k = new_kernel(b->decl);
    if (k) set_item(b->decl, "handle", PyLong_FromVoidPtr(k));
    else h_SetStatus(status, OPM_RESOURCE_EXHAUSTED, "cannot record the kernel");
  }
  h_DeleteKernelBuilder(b);
}

/* load(path, check) -> dict: dlopen the library, run its entry point with the table. */
PyObject* py_load(PyObject* self, PyObject* args) {
  (void)self;
  const char* path;
  PyObject* check;
  if (!PyArg_ParseTuple(args, "sO", &path, &check)) return NULL;
  if (session) {
    PyErr_SetString(PyExc_RuntimeError, "a plugin's init loaded another library");
    return NULL;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return Py_BuildValue("{s:s,s:s}", "error", "dlopen", "message", err ? err : "dlopen failed");
  }
  OPM_InitPluginFn init;
  /* dlsym returns an object pointer; POSIX guarantees it converts to a function pointer. */
  *(void**)(&init) = dlsym(handle, OPM_PLUGIN_ENTRY_POINT);
  if (!init) {
    return Py_BuildValue("{s:s,s:s}", "error", "entry", "message",
                         "the library exports no " OPM_PLUGIN_ENTRY_POINT " (define it with "
                         "OPM_PLUGIN_INIT from opmarket/c_api.h)");
  }
  Session s = {check, PyList_New(0), PyList_New(0)};
  if (!s.ops || !s.kernels) {
    Py_XDECREF(s.ops);
    Py_XDECREF(s.kernels);
    return NULL;
  }
  OPM_Status status = {OPM_OK, NULL};
  OPM_PluginInit in = {sizeof(OPM_PluginInit), OPM_C_API_VERSION, &host_api, &status, 0};
  session = &s;
  init(&in);
  session = NULL;
  PyObject* result = Py_BuildValue(
      "{s:s,s:I,s:I,s:i,s:s,s:N,s:N,s:N}", "error", "", "plugin_api_version",
      in.plugin_api_version, "host_api_version", (unsigned)OPM_C_API_VERSION,
      "code", (int)status.code, "message", h_Message(&status), "ops", s.ops,
      "kernels", s.kernels, "handle", PyLong_FromVoidPtr(handle));
  free(status.message);
  return result;
}

