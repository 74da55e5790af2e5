// scf.mlir of `pimbuild model=gemv model.size.m=8 model.size.n=16 lowering.fusion=none`:
// y = W x as a thin matmul: zero the accumulator, one row dot product per parallel
// iteration, then copy the result into the caller's output buffer.
// CHECK-LABEL: func.func @forward(%arg0: memref<8x16xf32>
// CHECK-SAME: %arg1: memref<16xf32>
// CHECK-SAME: %arg2: memref<8xf32>
// CHECK: [[X:%.*]] = memref.expand_shape %arg1
// CHECK: [[ACC:%.*]] = memref.alloc() {{.*}} : memref<8x1xf32>
// Nest 0: zero the accumulator.
// CHECK: scf.parallel ({{%.*}}, {{%.*}}) = ({{%.*}}, {{%.*}}) to (%c8, %c1)
// CHECK-NEXT: memref.store {{%.*}}, [[ACC]]
// Nest 1: parallel over the 8 rows, sequential over the 16 columns.
// CHECK: scf.parallel ({{%.*}}, {{%.*}}) = ({{%.*}}, {{%.*}}) to (%c8, %c1)
// CHECK-NEXT: scf.for {{%.*}} = {{%.*}} to %c16
// CHECK: memref.load %arg0
// CHECK: memref.load [[X]]
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: memref.store {{%.*}}, [[ACC]]
// Nest 2: the result is a view of the accumulator, so it is copied out.
// CHECK: scf.parallel ({{%.*}}) = ({{%.*}}) to (%c8)
// CHECK: memref.store {{%.*}}, %arg2
// CHECK-NOT: scf.parallel
// CHECK: return
