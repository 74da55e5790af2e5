// scf.mlir of `pimbuild model=softmax model.size.rows=4 model.size.cols=16 lowering.fusion=none`:
// the paper's eight nests, each a top-level scf.parallel.
// CHECK-LABEL: func.func @forward(%arg0: memref<4x16xf32>
// CHECK-SAME: %arg1: memref<4x16xf32>
// Nest 0: argmax index init (fill, i64).
// CHECK: scf.parallel ([[I0:%.*]]) = ({{%.*}}) to ({{%.*}}) step
// CHECK-NEXT: memref.store {{%.*}}, {{%.*}}[[[I0]]] : memref<4xi64>
// Nest 1: running max init (fill with -inf).
// CHECK: scf.parallel
// CHECK-NEXT: memref.store {{%.*}} : memref<4xf32>
// Nest 2: max over each row: parallel rows, sequential columns.
// CHECK: scf.parallel
// CHECK-NEXT: scf.for {{%.*}} = {{%.*}} to %c16
// CHECK: arith.maximumf {{.*}} fastmath<reassoc,contract> : f32
// Nests 3 and 4: x - max, exp.
// CHECK: scf.parallel ({{%.*}}, {{%.*}}) = ({{%.*}}, {{%.*}}) to (%c4, %c16)
// CHECK: arith.subf
// CHECK: scf.parallel
// CHECK: math.exp
// Nest 5: sum init; nest 6: sum over each row; nest 7: divide.
// CHECK: scf.parallel
// CHECK-NEXT: memref.store {{%.*}} : memref<4x1xf32>
// CHECK: scf.parallel
// CHECK-NEXT: scf.for
// CHECK: arith.addf
// CHECK: scf.parallel
// CHECK: arith.divf
// CHECK-NEXT: memref.store {{%.*}}, %arg1
// CHECK-NOT: scf.parallel
// CHECK: return
