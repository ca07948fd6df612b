/* The run functions of the cases (cases_*.c), one per case of compat_cases.c. */
#ifndef JITOP_COMPAT_RUNS_H
#define JITOP_COMPAT_RUNS_H

#include "compat.h"

void run_saxpy(compat_env *e);
void run_vadd_types(compat_env *e);
void run_grid_stride(compat_env *e);
void run_transpose_naive(compat_env *e);
void run_defines(compat_env *e);
void run_two_sources(compat_env *e);
void run_tmpl_axpy(compat_env *e);
void run_tmpl_nontype(compat_env *e);
void run_tmpl_namespace(compat_env *e);
void run_tmpl_nested(compat_env *e);
void run_tmpl_default(compat_env *e);
void run_tmpl_spelling(compat_env *e);
void run_struct_mixed(compat_env *e);
void run_struct_aligned(compat_env *e);
void run_struct_big(compat_env *e);
void run_const_table(compat_env *e);
void run_const_namespaced(compat_env *e);
void run_const_template_var(compat_env *e);
void run_const_initialized(compat_env *e);
void run_device_global_handoff(compat_env *e);
void run_device_global_api(compat_env *e);
void run_half_convert(compat_env *e);
void run_half2_arith(compat_env *e);
void run_half_fma(compat_env *e);
void run_bf16_convert(compat_env *e);
void run_bf16_dot(compat_env *e);
void run_libcu_limits(compat_env *e);
void run_libcu_complex(compat_env *e);
void run_hdr_extern_c(compat_env *e);
void run_hdr_template(compat_env *e);
void run_hdr_ns_template(compat_env *e);
void run_rdc_cross_call(compat_env *e);
void run_rdc_extern_var(compat_env *e);
void run_rdc_dynamic_parallelism(compat_env *e);
void run_math_f32(compat_env *e);
void run_math_f64(compat_env *e);
void run_math_fast(compat_env *e);
void run_index64(compat_env *e);
void run_cg_tile_reduce(compat_env *e);
void run_cg_tile_shfl(compat_env *e);
void run_cg_grid_sync(compat_env *e);
void run_cg_cluster(compat_env *e);
void run_cub_block_reduce(compat_env *e);
void run_cub_block_scan(compat_env *e);
void run_cub_warp_reduce(compat_env *e);
void run_warp_xor_sum(compat_env *e);
void run_warp_scan(compat_env *e);
void run_warp_ballot(compat_env *e);
void run_atomic_float_hist(compat_env *e);
void run_atomic_double_sum(compat_env *e);
void run_atomic_cas_max(compat_env *e);
void run_atomic_int_hist(compat_env *e);
void run_shared_static(compat_env *e);
void run_shared_dynamic(compat_env *e);
void run_params_100(compat_env *e);
void run_kernels_500(compat_env *e);
void run_curand_bits(compat_env *e);
void run_curand_uniform(compat_env *e);

#endif
