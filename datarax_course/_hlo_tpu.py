# ruff: noqa: E501  (the compiled text's lines, as XLA printed them)
"""A compiled program's text from a TPU, for the checker of tutorial 12 (``12.collectives_of``).

On CPU devices XLA prints every collective as one synchronous instruction; its TPU and GPU
compilers may split one into an asynchronous pair, ``collective-permute-start`` and
``collective-permute-done``, whose ``-start`` result is a tuple holding the operand, the
result and two ``u32[]`` words. No CPU can compile for a TPU, so the text is stored here.

`FIVE_COLLECTIVES_V5E_2X4` is the text of this program, compiled with jax 0.10.2 ahead of
time for a TPU v5e 2x4 slice (``jax.experimental.topologies.get_topology_desc(
platform="tpu", topology_name="v5e:2x4")``, on a host with one TPU v5e chip), on a float32
array of shape (1024, 1024) split over the slice's 8 chips on its first axis::

    def five(b):  # one chip's block, f32[128, 1024]
        return (
            jax.lax.all_gather(b, "data", tiled=True),
            jax.lax.psum_scatter(b * 2, "data", scatter_dimension=1, tiled=True),
            jax.lax.psum(b * 3, "data"),
            jax.lax.ppermute(b * 4, "data", [(i, (i + 1) % 8) for i in range(8)]),
            jax.lax.all_to_all(b * 5, "data", 1, 0, tiled=True),
        )

    jax.shard_map(five, mesh=mesh, in_specs=P("data"), out_specs=P("data"))

The multiples keep XLA from sharing one input between the collectives. XLA made the
permutation an asynchronous pair and left the other four synchronous.
"""

FIVE_COLLECTIVES_V5E_2X4 = r"""HloModule jit_five, is_scheduled=true, entry_computation_layout={(f32[128,1024]{1,0:T(8,128)})->(f32[1024,1024]{1,0:T(8,128)}, f32[128,128]{1,0:T(8,128)}, f32[128,1024]{1,0:T(8,128)}, f32[128,1024]{1,0:T(8,128)}, f32[1024,128]{1,0:T(8,128)})}, allow_spmd_sharding_propagation_to_output={true,true,true,true,true}, num_partitions=8, frontend_attributes={arg_layout_modes="default",arg_memory_spaces="0",out_layout_modes="default;default;default;default;default",out_memory_spaces="0;0;0;0;0"}

FileNames
1 "<stdin>"

FunctionNames
1 "five"
2 "<module>"

FileLocations
1 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=55 end_column=55}
2 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=125 end_column=125}
3 {file_name_id=1 function_name_id=2 line=22 end_line=22 column=10 end_column=10}
4 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=194 end_column=194}
5 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=213 end_column=213}
6 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=138 end_column=138}
7 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=76 end_column=76}
8 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=171 end_column=171}
9 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=12 end_column=12}
10 {file_name_id=1 function_name_id=1 line=19 end_line=19 column=154 end_column=154}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=1 parent_frame_id=2}
3 {file_location_id=2 parent_frame_id=1}
4 {file_location_id=2 parent_frame_id=4}
5 {file_location_id=3 parent_frame_id=1}
6 {file_location_id=4 parent_frame_id=6}
7 {file_location_id=5 parent_frame_id=6}
8 {file_location_id=6 parent_frame_id=6}
9 {file_location_id=7 parent_frame_id=6}
10 {file_location_id=8 parent_frame_id=6}
11 {file_location_id=9 parent_frame_id=6}
12 {file_location_id=1 parent_frame_id=6}
13 {file_location_id=2 parent_frame_id=6}
14 {file_location_id=10 parent_frame_id=6}


%fused_computation.1 (param_0.3: f32[128,1024]) -> (f32[16,8,8,128], f32[128,1024], f32[128,1024], f32[128,1024]) {
  %param_0.3 = f32[128,1024]{1,0:T(8,128)} parameter(0)
  %constant.3.clone.2 = f32[]{:T(128)} constant(5), metadata={op_name="jit(five)/shard_map" stack_frame_id=5}
  %mul.33 = f32[128,1024]{1,0:T(8,128)} broadcast(%constant.3.clone.2), dimensions={}, metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=7}
  %mul.32 = f32[128,1024]{1,0:T(8,128)} multiply(%param_0.3, %mul.33), metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=7}
  %bitcast.6 = f32[16,8,8,128]{3,2,1,0:T(8,128)S(1)} bitcast(%mul.32)
  %constant.1.clone.2.clone.1 = f32[]{:T(128)} constant(3), metadata={op_name="jit(five)/shard_map" stack_frame_id=5}
  %mul.37.clone.1 = f32[128,1024]{1,0:T(8,128)} broadcast(%constant.1.clone.2.clone.1), dimensions={}, metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=8}
  %mul.36.clone.1 = f32[128,1024]{1,0:T(8,128)S(1)} multiply(%param_0.3, %mul.37.clone.1), metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=8}
  %constant.0.clone.2.clone.1 = f32[]{:T(128)} constant(2), metadata={op_name="jit(five)/shard_map" stack_frame_id=5}
  %mul.39.clone.1 = f32[128,1024]{1,0:T(8,128)} broadcast(%constant.0.clone.2.clone.1), dimensions={}, metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=9}
  %mul.38.clone.1 = f32[128,1024]{1,0:T(8,128)S(1)} multiply(%param_0.3, %mul.39.clone.1), metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=9}
  %constant.2.clone.2.clone.1 = f32[]{:T(128)} constant(4), metadata={op_name="jit(five)/shard_map" stack_frame_id=5}
  %mul.35.clone.1 = f32[128,1024]{1,0:T(8,128)} broadcast(%constant.2.clone.2.clone.1), dimensions={}, metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=10}
  %mul.34.clone.1 = f32[128,1024]{1,0:T(8,128)S(1)} multiply(%param_0.3, %mul.35.clone.1), metadata={op_name="jit(five)/shard_map/mul" stack_frame_id=10}
  ROOT %tuple.9 = (f32[16,8,8,128]{3,2,1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}) tuple(%bitcast.6, %mul.36.clone.1, %mul.38.clone.1, %mul.34.clone.1)
}

%region_0.0 (reduce_scatter.0: f32[], reduce_scatter.1: f32[]) -> f32[] {
  %reduce_scatter.0 = f32[]{:T(128)} parameter(0), metadata={op_name="reduce_scatter"}
  %reduce_scatter.1 = f32[]{:T(128)} parameter(1), metadata={op_name="reduce_scatter"}
  ROOT %add.0 = f32[]{:T(128)} add(%reduce_scatter.0, %reduce_scatter.1), metadata={op_name="add" stack_frame_id=2}, backend_config={"flag_configs":[],"scoped_memory_configs":[],"used_scoped_memory_configs":[],"aliasing_operands":{"lists":[]}}
}

%region_1.0 (psum_invariant.0: f32[], psum_invariant.1: f32[]) -> f32[] {
  %psum_invariant.0 = f32[]{:T(128)} parameter(0), metadata={op_name="psum_invariant"}
  %psum_invariant.1 = f32[]{:T(128)} parameter(1), metadata={op_name="psum_invariant"}
  ROOT %add.2 = f32[]{:T(128)} add(%psum_invariant.0, %psum_invariant.1), metadata={op_name="add" stack_frame_id=4}, backend_config={"flag_configs":[],"scoped_memory_configs":[],"used_scoped_memory_configs":[],"aliasing_operands":{"lists":[]}}
}

%fused_computation (param_0.1: f32[16,8,8,128]) -> f32[128,8,128] {
  %param_0.1 = f32[16,8,8,128]{3,2,1,0:T(8,128)S(1)} parameter(0)
  %copy.8 = f32[16,8,8,128]{3,2,0,1:T(8,128)} copy(%param_0.1), metadata={op_name="jit(five)/shard_map/all_to_all" stack_frame_id=6}
  ROOT %bitcast.5 = f32[128,8,128]{2,0,1:T(8,128)S(1)} bitcast(%copy.8), metadata={op_name="jit(five)/shard_map/all_to_all" stack_frame_id=6}
}

ENTRY %main.0_spmd (param.1: f32[128,1024]) -> (f32[1024,1024], f32[128,128], f32[128,1024], f32[128,1024], f32[1024,128]) {
  %param.1 = f32[128,1024]{1,0:T(8,128)} parameter(0), sharding={devices=[8,1]<=[8]}, metadata={op_name="b"}
  %copy-start = (f32[128,1024]{1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)}, u32[]{:S(2)}) copy-start(%param.1)
  %multiply_bitcast_fusion = (f32[16,8,8,128]{3,2,1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}) fusion(%param.1), kind=kLoop, calls=%fused_computation.1, backend_config={"flag_configs":[],"window_config":{"kernel_window_bounds":[],"output_window_bounds":["16","8"],"input_window_bounds":[],"estimated_cycles":"3266","iteration_bounds":["1","1"],"cost_model_type":"COST_MODEL_TYPE_INVALID","ml_estimated_microseconds":0,"is_mask":false,"pad_output_on_minor_dim":"0","pad_input_on_minor_dim":"0","estimated_vmem_bytes":"0","estimated_bundle_count":"0","estimated_scoped_vmem_bytes":"0"},"scoped_memory_configs":[],"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"524288"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %get-tuple-element.8 = f32[128,1024]{1,0:T(8,128)S(1)} get-tuple-element(%multiply_bitcast_fusion), index=3
  %collective-permute-start = (f32[128,1024]{1,0:T(8,128)S(1)}, f32[128,1024]{1,0:T(8,128)S(1)}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%get-tuple-element.8), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,4},{4,5},{5,6},{6,7},{7,0}}, metadata={op_name="jit(five)/shard_map/ppermute" stack_frame_id=14}, backend_config={"flag_configs":[],"barrier_config":{"barrier_type":"CUSTOM","id":"2"},"scoped_memory_configs":[],"used_scoped_memory_configs":[]}
  %get-tuple-element.5 = f32[16,8,8,128]{3,2,1,0:T(8,128)S(1)} get-tuple-element(%multiply_bitcast_fusion), index=0
  %copy_bitcast_fusion = f32[128,8,128]{2,0,1:T(8,128)S(1)} fusion(%get-tuple-element.5), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(five)/shard_map/all_to_all" stack_frame_id=6}, backend_config={"flag_configs":[],"window_config":{"kernel_window_bounds":[],"output_window_bounds":["8","16","1"],"input_window_bounds":[],"estimated_cycles":"112","iteration_bounds":["1","1","1"],"cost_model_type":"COST_MODEL_TYPE_INVALID","ml_estimated_microseconds":0,"is_mask":false,"pad_output_on_minor_dim":"0","pad_input_on_minor_dim":"0","estimated_vmem_bytes":"0","estimated_bundle_count":"0","estimated_scoped_vmem_bytes":"0"},"scoped_memory_configs":[],"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"0"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %all_to_all.15 = f32[128,8,128]{2,0,1:T(8,128)S(1)} all-to-all(%copy_bitcast_fusion), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={1}, metadata={op_name="jit(five)/shard_map/all_to_all" stack_frame_id=6}, backend_config={"flag_configs":[],"barrier_config":{"barrier_type":"GLOBAL","id":"-1"},"scoped_memory_configs":[],"collective_algorithm_config":{"emitter":"AllToAllEmitter","debug":"\nmax_rdma_size_bytes: 32768"},"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"0"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %get-tuple-element.7 = f32[128,1024]{1,0:T(8,128)S(1)} get-tuple-element(%multiply_bitcast_fusion), index=2
  %reduce_scatter.7 = f32[128,128]{1,0:T(8,128)} reduce-scatter(%get-tuple-element.7), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, dimensions={1}, to_apply=%region_0.0, metadata={op_name="jit(five)/shard_map/reduce_scatter" stack_frame_id=12}, backend_config={"flag_configs":[],"barrier_config":{"barrier_type":"CUSTOM","id":"3"},"scoped_memory_configs":[],"collective_algorithm_config":{"emitter":"SingleInputAllReduceScatterFusion","strategy":"StrategyRing","debug":"\nStrategyRing{colors:1 phases:1 cores:{8} nophase0:0 reserved_sflags:0 cross_module_on_2d_plane:0 has_reordering_map:0 use_routing_table_indices:0}\nStrategyRing{colors:1 phases:1 cores:{8} nophase0:0 reserved_sflags:0 cross_module_on_2d_plane:0 has_reordering_map:0 use_routing_table_indices:0}\nType: 1D phase_count: 1; color_count: 1; sharded_partitions: 8; original_shape: f32[128,1024]{1,0:T(8,128)S(1)}; per_color_shard_counts: 8; color_dim: 1; sharding_dim: 1; sharding_type: minor; convert_all_gather_output_to_bf16: 0; formatting steps: ()\nall-reduce-scatter fusion ND: span_size:1024*k512Byte, shard count:8, span_count:1, total_size:1024*k512Byte, valid_granules:1024*k512Byte"},"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"786432"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %get-tuple-element.6 = f32[128,1024]{1,0:T(8,128)S(1)} get-tuple-element(%multiply_bitcast_fusion), index=1
  %psum_invariant.7 = f32[128,1024]{1,0:T(8,128)} all-reduce(%get-tuple-element.6), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%region_1.0, metadata={op_name="jit(five)/shard_map/psum_invariant" stack_frame_id=13}, backend_config={"flag_configs":[],"barrier_config":{"barrier_type":"CUSTOM","id":"1"},"scoped_memory_configs":[{"memory_space":"0","offset":"0","size":"67108864"}],"collective_algorithm_config":{"emitter":"RotatedPincerShortEmitter","strategy":"StrategyRing","debug":"\nStrategyRing{colors:1 phases:1 cores:{8} nophase0:0 reserved_sflags:0 cross_module_on_2d_plane:0 has_reordering_map:1 use_routing_table_indices:0},is_multistep:1"},"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"786432"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %collective-permute-done = f32[128,1024]{1,0:T(8,128)S(1)} collective-permute-done(%collective-permute-start), metadata={op_name="jit(five)/shard_map/ppermute" stack_frame_id=14}
  %copy-done = f32[128,1024]{1,0:T(8,128)S(1)} copy-done(%copy-start)
  %all-gather.4 = f32[1024,1024]{1,0:T(8,128)S(1)} all-gather(%copy-done), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}, use_global_device_ids=true, frontend_attributes={async_collective_name="all-gather-start"}, metadata={op_name="jit(five)/shard_map/all_gather" stack_frame_id=11}, backend_config={"flag_configs":[],"barrier_config":{"barrier_type":"CUSTOM","id":"0"},"scoped_memory_configs":[],"collective_algorithm_config":{"emitter":"1DAllGatherNonMajorDim","debug":"\ngroup_size = 8 \nhas_reordering_map: true \nper_stride_size = 524288 bytes \nshard_size = 524288 bytes "},"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"0"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %copy.12 = f32[1024,1024]{1,0:T(8,128)} copy(%all-gather.4), backend_config={"flag_configs":[],"scoped_memory_configs":[],"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"0"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %copy.13 = f32[128,1024]{1,0:T(8,128)} copy(%collective-permute-done), backend_config={"flag_configs":[],"scoped_memory_configs":[],"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"0"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  %bitcast.7 = f32[1024,128]{1,0:T(8,128)S(1)} bitcast(%all_to_all.15)
  %copy.14 = f32[1024,128]{1,0:T(8,128)} copy(%bitcast.7), backend_config={"flag_configs":[],"scoped_memory_configs":[],"used_scoped_memory_configs":[{"memory_space":"1","offset":"0","size":"0"}],"retry_config":{"retry_count":"0"},"aliasing_operands":{"lists":[]}}
  ROOT %tuple.11 = (f32[1024,1024]{1,0:T(8,128)}, f32[128,128]{1,0:T(8,128)}, f32[128,1024]{1,0:T(8,128)}, f32[128,1024]{1,0:T(8,128)}, f32[1024,128]{1,0:T(8,128)}) tuple(%copy.12, %reduce_scatter.7, %psum_invariant.7, %copy.13, %copy.14)
}

"""
