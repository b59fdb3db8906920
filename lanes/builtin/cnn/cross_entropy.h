// nn.CrossEntropyLoss (mean over the batch) on logits [n, classes]: the loss, and its gradient
// d(loss)/d(logits) = (softmax - onehot) / n written (=) into the logits' gradient. In double
// inside a row (log-sum-exp around the row's maximum).
#pragma once
#include <cstdint>

namespace pipelane::cnn {

double cross_entropy(const float* logits, const std::int32_t* labels, int n, int classes, float* dlogits);

}  // namespace pipelane::cnn
