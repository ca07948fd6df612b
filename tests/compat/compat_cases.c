/* The compatibility suite's manifest: every case's sources (under
 * tests/compat/kernels, "@" for generated ones), NVRTC options, the ops and
 * globals it expects, the issue-20 features it needs, and its GPU check
 * (cases_*.c, whose comments justify each tolerance). */
#include "compat.h"
#include "compat_runs.h"

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

#define TOOLKIT COMPAT_NEEDS_TOOLKIT_HEADERS
#define HDR COMPAT_NEEDS_HEADER_KERNELS
#define GLOBALS COMPAT_NEEDS_GLOBALS
#define RDC COMPAT_NEEDS_RDC

const compat_case compat_cases[] = {
    /* Plain extern "C" kernels. */
    {"saxpy", "extern C", LIST("basic_saxpy.cu"), NULL, LIST("saxpy"), NULL, 0, 0, run_saxpy},
    {"vadd_types", "extern C", LIST("basic_vadd_types.cu"), NULL,
     LIST("vadd_f32", "vadd_f64", "vadd_i32", "vadd_i64", "vadd_u16", "vadd_u8"), NULL, 0, 0,
     run_vadd_types},
    {"grid_stride", "extern C", LIST("basic_grid_stride.cu"), NULL, LIST("scale_shift_strided"),
     NULL, 0, 0, run_grid_stride},
    {"transpose_naive", "extern C", LIST("basic_transpose.cu"), NULL, LIST("transpose_naive"), NULL,
     0, 0, run_transpose_naive},
    {"defines", "extern C",
     LIST("basic_defines.cu"),
     LIST("-DCOMPAT_SCALE=3", "-D", "COMPAT_BLOCK=128", "--define-macro", "COMPAT_OFFSET=-7"),
     LIST("scaled_copy"), NULL, 0, 0, run_defines},
    {"two_sources", "extern C", LIST("basic_two_a.cu", "basic_two_b.cu"), NULL,
     LIST("unit_a_map", "unit_b_map"), NULL, 0, 0, run_two_sources},

    /* C++ templates through name expressions. */
    {"tmpl_axpy", "templates", LIST("tmpl_axpy.cu"), NULL,
     LIST("axpy<float>", "axpy<double>", "axpy<int>"), NULL, 0, 0, run_tmpl_axpy},
    {"tmpl_nontype", "templates", LIST("tmpl_nontype.cu"), NULL,
     LIST("scale_vec<float, 4>", "scale_vec<double, 2>", "bits_op<-3, true, 0xFFFFu>",
          "bits_op<5, false, 0xFFFFFF00u>"),
     NULL, 0, 0, run_tmpl_nontype},
    {"tmpl_namespace", "templates", LIST("tmpl_namespace.cu"), NULL,
     LIST("compat::detail::blend<float>", "compat::detail::blend<double>"), NULL, 0, 0,
     run_tmpl_namespace},
    {"tmpl_nested", "templates", LIST("tmpl_nested.cu"), NULL,
     LIST("zip_with<ops::Mul<int>, int>", "zip_with<ops::Compose<ops::Add<int>, ops::Mul<int>>, int>"),
     NULL, 0, 0, run_tmpl_nested},
    {"tmpl_default", "templates", LIST("tmpl_default.cu"), NULL,
     LIST("block_sum<int>", "block_sum<double, 128>"), NULL, 0, 0, run_tmpl_default},
    {"tmpl_spelling", "templates", LIST("tmpl_spelling.cu"), NULL,
     LIST("fill_affine<float,4>", "fill_affine<float, 4>", "fill_affine< float , 4 >"), NULL, 0,
     COMPAT_NEEDS_NAME_SPELLING, run_tmpl_spelling},

    /* Structures passed by value. */
    {"struct_mixed", "struct params", LIST("params_struct.cu"), NULL, LIST("affine_apply"), NULL,
     0, 0, run_struct_mixed},
    {"struct_aligned", "struct params", LIST("params_struct.cu"), NULL, LIST("view_dot"), NULL, 0,
     0, run_struct_aligned},
    {"struct_8k", "struct params", LIST("params_struct.cu"), NULL, LIST("big_param_mix"), NULL, 0,
     0, run_struct_big},

    /* half and bfloat16 from the toolkit's headers. */
    {"half_convert", "half/bf16", LIST("half_math.cu"), NULL, LIST("half_round_trip"), NULL, 0,
     TOOLKIT, run_half_convert},
    {"half2_arith", "half/bf16", LIST("half_math.cu"), NULL, LIST("half2_add_mul"), NULL, 0,
     TOOLKIT, run_half2_arith},
    {"half_fma", "half/bf16", LIST("half_math.cu"), NULL, LIST("half_fma"), NULL, 0, TOOLKIT,
     run_half_fma},
    {"bf16_convert", "half/bf16", LIST("bf16_math.cu"), NULL, LIST("bf16_round_trip"), NULL, 0,
     TOOLKIT, run_bf16_convert},
    {"bf16_dot", "half/bf16", LIST("bf16_math.cu"), NULL, LIST("bf16_dot_rows"), NULL, 0, TOOLKIT,
     run_bf16_dot},

    /* libcu++ (<cuda/std/...>). */
    {"libcu_limits", "libcu++", LIST("libcu_std.cu"), NULL,
     LIST("saturate_from_float<signed char>", "saturate_from_float<unsigned short>"), NULL, 0,
     TOOLKIT, run_libcu_limits},
    {"libcu_complex", "libcu++", LIST("libcu_std.cu"), NULL, LIST("complex_mul_conj"), NULL, 0,
     TOOLKIT, run_libcu_complex},

    /* Cooperative groups. */
    {"cg_tile_reduce", "cooperative groups", LIST("coop_groups.cu"), NULL,
     LIST("tile32_reduce_sum"), NULL, 0, TOOLKIT, run_cg_tile_reduce},
    {"cg_tile_shfl", "cooperative groups", LIST("coop_groups.cu"), NULL, LIST("tile16_max"), NULL,
     0, TOOLKIT, run_cg_tile_shfl},
    {"cg_grid_sync", "cooperative groups", LIST("coop_groups.cu"), NULL, LIST("grid_center"), NULL,
     0, TOOLKIT, run_cg_grid_sync},
    {"cg_cluster", "cooperative groups", LIST("coop_groups.cu"), NULL, LIST("cluster_ring_sum"),
     NULL, 0, TOOLKIT, run_cg_cluster},

    /* CUB. */
    {"cub_block_reduce", "cub", LIST("cub_blocks.cu"), NULL, LIST("cub_block_sum"), NULL, 0,
     TOOLKIT, run_cub_block_reduce},
    {"cub_block_scan", "cub", LIST("cub_blocks.cu"), NULL, LIST("cub_block_exclusive_scan"), NULL,
     0, TOOLKIT, run_cub_block_scan},
    {"cub_warp_reduce", "cub", LIST("cub_blocks.cu"), NULL, LIST("cub_warp_sum"), NULL, 0, TOOLKIT,
     run_cub_warp_reduce},

    /* cuRAND's device API. */
    {"curand_bits", "curand", LIST("curand_philox.cu"), NULL, LIST("philox_bits"), NULL, 0,
     TOOLKIT, run_curand_bits},
    {"curand_uniform", "curand", LIST("curand_philox.cu"), NULL, LIST("philox_uniform"), NULL, 0,
     TOOLKIT, run_curand_uniform},

    /* Module globals. */
    {"const_table", "globals", LIST("globals_const.cu"), NULL, LIST("poly_eval"),
     LIST("poly_coeffs"), 0, GLOBALS, run_const_table},
    {"const_namespaced", "globals", LIST("globals_const.cu"), NULL, LIST("lut_gather"),
     LIST("compat_ns::lut"), 0, GLOBALS, run_const_namespaced},
    {"const_template_var", "globals", LIST("globals_const.cu"), NULL,
     LIST("apply_gain<float>", "apply_gain<double>"), LIST("gain<float>", "gain<double>"), 0,
     GLOBALS, run_const_template_var},
    {"const_initialized", "globals", LIST("globals_init.cu"), NULL, LIST("prime_scale"),
     LIST("primes_table"), 0, 0, run_const_initialized},
    {"device_global_handoff", "globals", LIST("globals_device.cu"), NULL,
     LIST("stash_store", "stash_load"), LIST("stash", "stash_writes"), 0, 0,
     run_device_global_handoff},
    {"device_global_api", "globals", LIST("globals_device.cu"), NULL,
     LIST("stash_store", "stash_load"), LIST("stash", "stash_writes"), 0, GLOBALS,
     run_device_global_api},

    /* Many parameters, many kernels (generated sources). */
    {"params_100", "many params/kernels", LIST("@params100.cu"), NULL, LIST("params100"), NULL, 0,
     COMPAT_NEEDS_MANY_PARAMS, run_params_100},
    {"kernels_500", "many params/kernels", LIST("@many500.cu"), NULL,
     LIST("many_k000", "many_k250", "many_k499"), NULL, COMPAT_MANY_KERNELS,
     COMPAT_NEEDS_MANY_KERNELS, run_kernels_500},

    /* Kernels defined in included headers. */
    {"hdr_extern_c", "header kernels", LIST("hdr_extern.cu"), NULL, LIST("hdr_scale_add"), NULL, 0,
     HDR, run_hdr_extern_c},
    {"hdr_template", "header kernels", LIST("hdr_template.cu"), NULL,
     LIST("tile_accumulate<float, 4>", "tile_accumulate<int, 8>"), NULL, 0, HDR,
     run_hdr_template},
    {"hdr_ns_template", "header kernels", LIST("hdr_template.cu"), NULL,
     LIST("compat::hdr::clamp_copy<double>"), NULL, 0, HDR, run_hdr_ns_template},

    /* Relocatable units linked together. */
    {"rdc_cross_call", "rdc", LIST("rdc_main.cu", "rdc_lib.cu"), LIST("-dc"), LIST("rdc_apply"),
     NULL, 0, RDC, run_rdc_cross_call},
    {"rdc_extern_var", "rdc", LIST("rdc_main.cu", "rdc_lib.cu"), LIST("-dc"),
     LIST("rdc_set_bias", "rdc_add_bias"), LIST("lib_bias"), 0, RDC, run_rdc_extern_var},
    {"rdc_dynamic_parallelism", "rdc", LIST("rdc_dynpar.cu"), LIST("-dc"),
     LIST("dp_parent", "dp_child"), NULL, 0, RDC, run_rdc_dynamic_parallelism},

    /* Shared memory. */
    {"shared_static", "shared memory", LIST("shared_tiles.cu"), NULL, LIST("transpose_tiled"), NULL,
     0, 0, run_shared_static},
    {"shared_dynamic", "shared memory", LIST("shared_dynamic.cu"), NULL, LIST("reverse_segments"),
     NULL, 0, 0, run_shared_dynamic},

    /* Warp shuffles. */
    {"warp_xor_sum", "warp", LIST("warp_shuffle.cu"), NULL, LIST("warp_xor_sum"), NULL, 0, 0,
     run_warp_xor_sum},
    {"warp_scan", "warp", LIST("warp_shuffle.cu"), NULL, LIST("warp_inclusive_scan"), NULL, 0, 0,
     run_warp_scan},
    {"warp_ballot", "warp", LIST("warp_shuffle.cu"), NULL, LIST("warp_ballot_count"), NULL, 0, 0,
     run_warp_ballot},

    /* Atomics. */
    {"atomic_float_hist", "atomics", LIST("atomics.cu"), NULL, LIST("hist_weighted_f32"), NULL, 0,
     0, run_atomic_float_hist},
    {"atomic_double_sum", "atomics", LIST("atomics.cu"), NULL, LIST("sum_f64"), NULL, 0, 0,
     run_atomic_double_sum},
    {"atomic_cas_max", "atomics", LIST("atomics.cu"), NULL, LIST("max_f32_cas"), NULL, 0, 0,
     run_atomic_cas_max},
    {"atomic_int_hist", "atomics", LIST("atomics.cu"), NULL, LIST("hist_count_u32"), NULL, 0, 0,
     run_atomic_int_hist},

    /* Math library. */
    {"math_f32", "math", LIST("math_funcs.cu"), NULL, LIST("math_f32"), NULL, 0, 0, run_math_f32},
    {"math_f64", "math", LIST("math_funcs.cu"), NULL, LIST("math_f64"), NULL, 0, 0, run_math_f64},
    {"math_fast", "math", LIST("math_fast.cu"), LIST("--use_fast_math"), LIST("fast_math_f32"),
     NULL, 0, 0, run_math_fast},

    /* 64-bit indexing. */
    {"index64", "64-bit indexing", LIST("index64.cu"), NULL, LIST("fill_hash_u8"), NULL, 0, 0,
     run_index64},
};

const size_t compat_ncases = sizeof compat_cases / sizeof compat_cases[0];
