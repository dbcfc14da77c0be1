/* Recording stand-ins for the CUDA runtime calls made by a CuTe DSL host launcher.
 *
 * `compiled.export_to_c()` writes an object whose host code imports exactly the eight
 * functions below.  Linking that object against this file (never against libcudart)
 * and calling its entry point yields the complete launch the DSL would make: grid,
 * block, dynamic shared memory, launch and function attributes, and the bytes of
 * every kernel parameter.  Nothing here talks to a GPU.
 *
 * Compiled at build time with -DNVFP4_ENTRY=<entry symbol> -DNVFP4_INIT=<init symbol>
 * -DNVFP4_LOAD=<load-to-device symbol>.
 */
#include <stdint.h>
#include <string.h>

typedef struct { unsigned x, y, z; } rec_dim3;
typedef struct { int id; int pad; unsigned char val[64]; } rec_launch_attr;
typedef struct {
    rec_dim3 grid;
    rec_dim3 block;
    size_t dynamic_smem_bytes;
    void *stream;
    rec_launch_attr *attrs;
    unsigned num_attrs;
} rec_launch_config;

enum { CALL_LOAD_DATA = 1, CALL_GET_KERNEL, CALL_KERNEL_GET_ATTR, CALL_DEVICE_GET_ATTR,
       CALL_GET_DEVICE, CALL_KERNEL_SET_ATTR, CALL_FUNC_SET_ATTR, CALL_LAUNCH };

#define REC_MAX_CALLS 256
#define REC_MAX_PARAMS 64
#define REC_MAX_ATTRS 16
#define REC_PARAM_BYTES 65536

typedef struct { int kind; int attr; long long value; int device; } rec_call;

/* Everything below is read by the Python side through ctypes. */
int rec_num_calls;
rec_call rec_calls[REC_MAX_CALLS];
const void *rec_code;
char rec_kernel_name[1024];
int rec_num_launches;
unsigned rec_grid[3];
unsigned rec_block[3];
unsigned long long rec_smem;
unsigned rec_num_attrs;
rec_launch_attr rec_attrs[REC_MAX_ATTRS];
int rec_num_params;                      /* set by Python before the call */
unsigned rec_param_sizes[REC_MAX_PARAMS]; /* set by Python before the call */
unsigned char rec_param_bytes[REC_PARAM_BYTES];
int rec_device_attr_values[256];          /* answers to cudaDeviceGetAttribute, set by Python */
int rec_kernel_attr_values[64];           /* answers to cuKernelGetAttribute, set by Python */

static void note(int kind, int attr, long long value, int device) {
    if (rec_num_calls < REC_MAX_CALLS) {
        rec_call c = {kind, attr, value, device};
        rec_calls[rec_num_calls] = c;
    }
    rec_num_calls++;
}

int _cudaLibraryLoadData(void **library, const void *code, void *jit_options, void **jit_values,
                         unsigned num_jit, void *lib_options, void **lib_values, unsigned num_lib) {
    (void)jit_options; (void)jit_values; (void)lib_options; (void)lib_values;
    rec_code = code;
    *library = (void *)0x11110000;
    note(CALL_LOAD_DATA, (int)num_jit, (long long)num_lib, 0);
    return 0;
}

int _cudaLibraryGetKernel(void **kernel, void *library, const char *name) {
    (void)library;
    strncpy(rec_kernel_name, name, sizeof(rec_kernel_name) - 1);
    *kernel = (void *)0x22220000;
    note(CALL_GET_KERNEL, 0, 0, 0);
    return 0;
}

int _cuKernelGetAttribute(int *value, int attr, void *kernel, int device) {
    (void)kernel;
    *value = (attr >= 0 && attr < 64) ? rec_kernel_attr_values[attr] : 0;
    note(CALL_KERNEL_GET_ATTR, attr, *value, device);
    return 0;
}

int _cudaDeviceGetAttribute(int *value, int attr, int device) {
    *value = (attr >= 0 && attr < 256) ? rec_device_attr_values[attr] : 0;
    note(CALL_DEVICE_GET_ATTR, attr, *value, device);
    return 0;
}

int _cudaGetDevice(int *device) {
    *device = 0;
    note(CALL_GET_DEVICE, 0, 0, 0);
    return 0;
}

int _cudaKernelSetAttributeForDevice(void *kernel, int attr, int value, int device) {
    (void)kernel;
    note(CALL_KERNEL_SET_ATTR, attr, value, device);
    return 0;
}

int _cudaFuncSetAttribute(const void *func, int attr, int value) {
    (void)func;
    note(CALL_FUNC_SET_ATTR, attr, value, 0);
    return 0;
}

int _cudaLaunchKernelEx(const rec_launch_config *config, void *kernel, void **args) {
    (void)kernel;
    rec_grid[0] = config->grid.x; rec_grid[1] = config->grid.y; rec_grid[2] = config->grid.z;
    rec_block[0] = config->block.x; rec_block[1] = config->block.y; rec_block[2] = config->block.z;
    rec_smem = config->dynamic_smem_bytes;
    rec_num_attrs = config->num_attrs < REC_MAX_ATTRS ? config->num_attrs : REC_MAX_ATTRS;
    memcpy(rec_attrs, config->attrs, rec_num_attrs * sizeof(rec_launch_attr));
    size_t offset = 0;
    for (int i = 0; i < rec_num_params && i < REC_MAX_PARAMS; i++) {
        if (offset + rec_param_sizes[i] > REC_PARAM_BYTES) return 1;
        memcpy(rec_param_bytes + offset, args[i], rec_param_sizes[i]);
        offset += rec_param_sizes[i];
    }
    rec_num_launches++;
    note(CALL_LAUNCH, 0, 0, 0);
    return 0;
}

extern void NVFP4_INIT(void **);
extern void NVFP4_LOAD(void **);
extern void NVFP4_ENTRY(void **args, int32_t num_args);

/* Fill the stack region the entry point will use with `value`, so that any parameter
 * byte the host code never writes shows up as a difference between two captures. */
__attribute__((noinline)) static void poison_stack(unsigned char value) {
    volatile unsigned char area[1 << 16];
    for (size_t i = 0; i < sizeof(area); i++) area[i] = value;
}

/* Load the embedded library the way the generated header does, then call the entry
 * point with one 8-byte slot per input (int32 inputs read the low 4 bytes). */
int capture_launch(uint64_t *inputs, int num_inputs, unsigned char poison) {
    void *library = 0;
    void *library_ptr = &library;
    int ret = 0;
    void *init_args[2] = {&library_ptr, &ret};
    NVFP4_INIT(init_args);
    if (ret) return -1;
    int32_t device_id = 0;
    void *load_args[3] = {&library_ptr, &device_id, &ret};
    NVFP4_LOAD(load_args);
    if (ret) return -2;
    void *args[REC_MAX_PARAMS + 1];
    if (num_inputs > REC_MAX_PARAMS) return -3;
    for (int i = 0; i < num_inputs; i++) args[i] = &inputs[i];
    int32_t entry_ret = 0;
    args[num_inputs] = &entry_ret;
    poison_stack(poison);
    NVFP4_ENTRY(args, num_inputs + 1);
    return entry_ret;
}
