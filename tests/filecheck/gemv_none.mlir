// scf.mlir of `pimbuild model=gemv model.size.m=8 model.size.n=16 lowering.fusion=none`:
// torch.mv decomposes to an elementwise product, an init and a row reduction.
// CHECK-LABEL: func.func @forward(%arg0: memref<8x16xf32>
// CHECK-SAME: %arg1: memref<16xf32>
// CHECK-SAME: %arg2: memref<8xf32>
// Nest 0: w * x, parallel over the whole matrix, into a temporary.
// CHECK: [[TMP:%.*]] = memref.alloc() {{.*}} : memref<8x16xf32>
// CHECK: scf.parallel ({{%.*}}, {{%.*}}) = ({{%.*}}, {{%.*}}) to (%c8, %c16)
// CHECK: memref.load %arg0
// CHECK: memref.load %arg1
// CHECK: arith.mulf
// CHECK: memref.store {{%.*}}, [[TMP]]
// Nest 1: zero the output.
// CHECK: scf.parallel ({{%.*}}) = ({{%.*}}) to (%c8)
// CHECK-NEXT: memref.store {{%.*}}, %arg2
// Nest 2: row sums, sequential over the 16 columns.
// CHECK: scf.parallel ({{%.*}}) = ({{%.*}}) to (%c8)
// CHECK-NEXT: scf.for {{%.*}} = {{%.*}} to %c16
// CHECK: memref.load [[TMP]]
// CHECK: arith.addf
// CHECK: memref.store {{%.*}}, %arg2
// CHECK-NOT: scf.parallel
// CHECK: return
