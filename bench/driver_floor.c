/* What the CUDA driver itself costs on the runtime's paths, measured from C, so that
 * bench/host_path.py can tell the driver's share from Python's.
 *
 *   cc -O2 -shared -fPIC -o driver_floor.so bench/driver_floor.c -ldl
 *
 * steady_floor: the per-run calls of GroupedGemmPlan (capture query, context, pointer-table
 * copy, cuLaunchKernelEx with the plan's CUlaunchConfig, event record), through the same
 * entry points the runtime resolved; returns microseconds per run, or -1 on a failure.
 * cold_floor: dlopen(libcuda) + cuInit, primary context, library load + kernel function,
 * in a process that has not touched CUDA yet; writes milliseconds to out[0..2].
 * No CUDA headers: handles are void pointers, results ints.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*is_capturing_fn)(void *stream, int *status);
typedef int (*set_context_fn)(void *context);
typedef int (*memcpy_fn)(uint64_t dst, const void *src, size_t size, void *stream);
typedef int (*launch_fn)(const void *config, void *function, void **params, void **extra);
typedef int (*record_fn)(void *event, void *stream);

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

double steady_floor(int runs, void *is_capturing, void *set_context, void *copy, void *launch,
                    void *record, void *context, uint64_t table, const void *staging,
                    size_t table_bytes, const void *config, void *function, void *stream,
                    void **params, void *event) {
    int status = 0, capturing = 0;
    double start = now_us();
    for (int i = 0; i < runs; i++) {
        status |= ((is_capturing_fn)is_capturing)(stream, &capturing);
        status |= ((set_context_fn)set_context)(context);
        if (copy)
            status |= ((memcpy_fn)copy)(table, staging, table_bytes, stream);
        status |= ((launch_fn)launch)(config, function, params, NULL);
        status |= ((record_fn)record)(event, stream);
    }
    double elapsed = now_us() - start;
    return status ? -1.0 : elapsed / runs;
}

int cold_floor(const char *cubin_path, const char *symbol, double *out) {
    double t0 = now_us();
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda)
        return -1;
    int (*init)(unsigned) = dlsym(cuda, "cuInit");
    int (*device_get)(int *, int) = dlsym(cuda, "cuDeviceGet");
    int (*retain)(void **, int) = dlsym(cuda, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = dlsym(cuda, "cuCtxSetCurrent");
    int (*load)(void **, const void *, void *, void *, unsigned, void *, void *, unsigned) =
        dlsym(cuda, "cuLibraryLoadData");
    int (*get_kernel)(void **, void *, const char *) = dlsym(cuda, "cuLibraryGetKernel");
    int (*get_function)(void **, void *) = dlsym(cuda, "cuKernelGetFunction");
    if (!init || !device_get || !retain || !set_current || !load || !get_kernel || !get_function)
        return -2;
    if (init(0))
        return -3;
    double t1 = now_us();
    int device;
    void *context;
    if (device_get(&device, 0) || retain(&context, device) || set_current(context))
        return -4;
    double t2 = now_us();
    FILE *file = fopen(cubin_path, "rb");
    if (!file)
        return -5;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *image = malloc(size);
    size_t got = fread(image, 1, size, file);
    fclose(file);
    void *library, *kernel, *function;
    if (got != (size_t)size || load(&library, image, NULL, NULL, 0, NULL, NULL, 0) ||
        get_kernel(&kernel, library, symbol) || get_function(&function, kernel))
        return -6;
    double t3 = now_us();
    out[0] = (t1 - t0) * 1e-3;
    out[1] = (t2 - t1) * 1e-3;
    out[2] = (t3 - t2) * 1e-3;
    return 0;
}
