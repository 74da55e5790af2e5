// scf.mlir of softmax under `lowering.fusion=controlled`: x - max and exp share one nest,
// but exp is not fused into the sum reduction that consumes it.
// CHECK-LABEL: func.func @forward
// Six nests: max init, row max, fused (x - max, exp), sum init, row sum, divide.
// CHECK: scf.parallel
// CHECK-NEXT: memref.store {{%.*}} : memref<4x1xf32>
// CHECK: scf.parallel
// CHECK-NEXT: scf.for
// CHECK: arith.maximumf
// CHECK: scf.parallel ({{%.*}}, {{%.*}})
// CHECK: arith.subf
// CHECK-NEXT: math.exp
// CHECK: scf.parallel
// CHECK-NEXT: memref.store {{%.*}} : memref<4x1xf32>
// CHECK: scf.parallel
// CHECK-NEXT: scf.for
// CHECK-NOT: math.exp
// CHECK: arith.addf
// CHECK: scf.parallel
// CHECK: arith.divf
// CHECK-NOT: scf.parallel
// CHECK: return
