// The built-in optimizers and the element-wise update rules, as X-macro lists: the one place a new
// built-in is named. registry.cpp registers every descriptor of OPSNN_BUILTIN_OPTIMIZERS (in this order,
// which is the order config errors and --help list them in); the CPU and CUDA kernels instantiate their
// generic fused update pass for every rule of OPSNN_ELEMENTWISE_RULES, and UpdateRule gets one value per
// rule. Plain preprocessor text with no includes, so nvcc and host code both read it.
#pragma once

// X(name): name_descriptor() is defined in src/optim/<name>.cpp.
#define OPSNN_BUILTIN_OPTIMIZERS(X) X(sgd) X(adam) X(adamw) X(lamb) X(lion) X(adagrad)

// X(name, Rule): single-pass element-wise rules (rules.h) run by the generic pass on every device; name is
// the UpdateRule enumerator.
#define OPSNN_ELEMENTWISE_RULES(X) X(lion, LionRule) X(adagrad, AdagradRule)
