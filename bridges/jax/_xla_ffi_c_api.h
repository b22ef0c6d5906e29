/* The part of XLA FFI's C API (xla/ffi/api/c_api.h) that opmarket's FFI handler uses, as of
 * API version OPM_XLA_FFI_MAJOR.OPM_XLA_FFI_MINOR, declared here so that the handler compiles
 * without jaxlib installed and ships built in opmarket's wheel.
 *
 * These are ABI facts of that API version: the enum values, and the layout of each struct up
 * to the last field the handler reads or writes (XLA_FFI_Api is declared up to
 * XLA_FFI_DeviceOrdinal_Get, the fields between named but untyped: the handler only reads
 * it, and the CUDA handler calls XLA_FFI_Stream_Get and XLA_FFI_DeviceOrdinal_Get). opmarket.jax uses the shipped handler
 * only with a jaxlib whose installed c_api.h declares this same API version, and builds
 * _ffi_shim.c against that header otherwise. tests/bridges/test_shipped_shims.py checks every
 * declaration against the installed jaxlib's own header. */
#ifndef OPM_XLA_FFI_C_API_H_
#define OPM_XLA_FFI_C_API_H_

#include <stddef.h>
#include <stdint.h>

#define OPM_XLA_FFI_MAJOR 0
#define OPM_XLA_FFI_MINOR 3
#define XLA_FFI_API_MAJOR OPM_XLA_FFI_MAJOR
#define XLA_FFI_API_MINOR OPM_XLA_FFI_MINOR

typedef struct XLA_FFI_Error XLA_FFI_Error;
typedef struct XLA_FFI_ExecutionContext XLA_FFI_ExecutionContext;
typedef struct XLA_FFI_Future XLA_FFI_Future;
typedef struct XLA_FFI_InternalApi XLA_FFI_InternalApi;

typedef enum { XLA_FFI_Extension_Metadata = 1 } XLA_FFI_Extension_Type;

typedef struct XLA_FFI_Extension_Base {
  size_t struct_size;
  XLA_FFI_Extension_Type type;
  struct XLA_FFI_Extension_Base* next;
} XLA_FFI_Extension_Base;

typedef struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int major_version;
  int minor_version;
} XLA_FFI_Api_Version;

#define XLA_FFI_Api_Version_STRUCT_SIZE \
  (offsetof(XLA_FFI_Api_Version, minor_version) + sizeof(int))

typedef enum {
  XLA_FFI_Error_Code_INVALID_ARGUMENT = 3,
  XLA_FFI_Error_Code_FAILED_PRECONDITION = 9,
  XLA_FFI_Error_Code_INTERNAL = 13,
} XLA_FFI_Error_Code;

typedef struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const char* message;
  XLA_FFI_Error_Code errc;
} XLA_FFI_Error_Create_Args;

#define XLA_FFI_Error_Create_Args_STRUCT_SIZE \
  (offsetof(XLA_FFI_Error_Create_Args, errc) + sizeof(XLA_FFI_Error_Code))

typedef enum {
  XLA_FFI_DataType_PRED = 1,
  XLA_FFI_DataType_S8 = 2,
  XLA_FFI_DataType_S16 = 3,
  XLA_FFI_DataType_S32 = 4,
  XLA_FFI_DataType_S64 = 5,
  XLA_FFI_DataType_U8 = 6,
  XLA_FFI_DataType_U16 = 7,
  XLA_FFI_DataType_U32 = 8,
  XLA_FFI_DataType_U64 = 9,
  XLA_FFI_DataType_F16 = 10,
  XLA_FFI_DataType_F32 = 11,
  XLA_FFI_DataType_F64 = 12,
  XLA_FFI_DataType_C64 = 15,
  XLA_FFI_DataType_BF16 = 16,
  XLA_FFI_DataType_C128 = 18,
  XLA_FFI_DataType_F8E5M2 = 19,
  XLA_FFI_DataType_F8E4M3FN = 20,
} XLA_FFI_DataType;

typedef struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
} XLA_FFI_Buffer;

typedef enum { XLA_FFI_ArgType_BUFFER = 1 } XLA_FFI_ArgType;
typedef enum { XLA_FFI_RetType_BUFFER = 1 } XLA_FFI_RetType;

typedef enum {
  XLA_FFI_AttrType_ARRAY = 1,
  XLA_FFI_AttrType_SCALAR = 3,
  XLA_FFI_AttrType_STRING = 4,
} XLA_FFI_AttrType;

typedef struct XLA_FFI_ByteSpan {
  const char* ptr;
  size_t len;
} XLA_FFI_ByteSpan;

typedef struct XLA_FFI_Scalar {
  XLA_FFI_DataType dtype;
  void* value;
} XLA_FFI_Scalar;

typedef struct XLA_FFI_Array {
  XLA_FFI_DataType dtype;
  size_t size;
  void* data;
} XLA_FFI_Array;

typedef struct XLA_FFI_TypeId {
  int64_t type_id;
} XLA_FFI_TypeId;

typedef enum { XLA_FFI_ExecutionStage_EXECUTE = 3 } XLA_FFI_ExecutionStage;

typedef struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_ArgType* types;
  void** args;
} XLA_FFI_Args;

typedef struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_RetType* types;
  void** rets;
} XLA_FFI_Rets;

typedef struct XLA_FFI_Attrs {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_AttrType* types;
  XLA_FFI_ByteSpan** names;
  void** attrs;
} XLA_FFI_Attrs;

/* The CUDA handler's stream (a cudaStream_t on platform CUDA) and device. */
typedef struct XLA_FFI_Stream_Get_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  void* stream; /* out */
} XLA_FFI_Stream_Get_Args;

#define XLA_FFI_Stream_Get_Args_STRUCT_SIZE \
  (offsetof(XLA_FFI_Stream_Get_Args, stream) + sizeof(void*))

typedef struct XLA_FFI_DeviceOrdinal_Get_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  int32_t device_ordinal; /* out */
} XLA_FFI_DeviceOrdinal_Get_Args;

#define XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE \
  (offsetof(XLA_FFI_DeviceOrdinal_Get_Args, device_ordinal) + sizeof(int32_t))

/* Only read by the handlers: the functions they call typed, the others placeholders of the
 * same size (function pointers). */
typedef struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Api_Version api_version;
  const XLA_FFI_InternalApi* internal_api;
  XLA_FFI_Error* (*XLA_FFI_Error_Create)(XLA_FFI_Error_Create_Args* args);
  void* XLA_FFI_Error_GetMessage;
  void* XLA_FFI_Error_Destroy;
  void* XLA_FFI_Handler_Register;
  XLA_FFI_Error* (*XLA_FFI_Stream_Get)(XLA_FFI_Stream_Get_Args* args);
  void* XLA_FFI_Type_Register;
  void* XLA_FFI_ExecutionContext_Get;
  void* XLA_FFI_State_Set;
  void* XLA_FFI_State_Get;
  void* XLA_FFI_DeviceMemory_Allocate;
  void* XLA_FFI_DeviceMemory_Free;
  void* XLA_FFI_ThreadPool_Schedule;
  void* XLA_FFI_ThreadPool_NumThreads;
  void* XLA_FFI_Future_Create;
  void* XLA_FFI_Future_SetAvailable;
  void* XLA_FFI_Future_SetError;
  void* XLA_FFI_RunId_Get;
  XLA_FFI_Error* (*XLA_FFI_DeviceOrdinal_Get)(XLA_FFI_DeviceOrdinal_Get_Args* args);
} XLA_FFI_Api;

typedef struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const XLA_FFI_Api* api;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_ExecutionStage stage;
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
} XLA_FFI_CallFrame;

typedef uint32_t XLA_FFI_Handler_Traits;

typedef struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  XLA_FFI_Handler_Traits traits;
  XLA_FFI_TypeId state_type_id;
} XLA_FFI_Metadata;

typedef struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata* metadata;
} XLA_FFI_Metadata_Extension;

#endif /* OPM_XLA_FFI_C_API_H_ */
