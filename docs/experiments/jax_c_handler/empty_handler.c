/* Session 27: the least an XLA FFI handler can be (answer the metadata query, else return
   success), to measure what ctypes and the GIL cost our Python handlers: measure.py. */
#include <stdint.h>
#include <stddef.h>
/* XLA FFI: answer the metadata extension, else do nothing. Layouts as nvfp4_aot.jax.xla_ffi. */
typedef struct { size_t struct_size; int type; void *next; } ExtBase;
typedef struct { size_t struct_size; void *ext; int32_t major, minor; } ApiVersion;
typedef struct { size_t struct_size; ApiVersion api_version; uint32_t traits; } Metadata;
typedef struct { ExtBase base; Metadata *metadata; } MetadataExt;
typedef struct { size_t struct_size; ExtBase *ext; void *api; void *ctx; int stage; } CallFrameHead;
void *empty_handler(CallFrameHead *frame) {
  if (frame->ext && frame->ext->type == 1) {
    Metadata *m = ((MetadataExt *)frame->ext)->metadata;
    m->api_version.major = 0; m->api_version.minor = 1; m->traits = 0;
  }
  return NULL;
}
