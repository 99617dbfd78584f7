// Everything of opsnn::nn in one include: Module, the layers, Sequential, the initialisers and SyncBatchNorm's
// reducer.
#pragma once

#include "opsnn/nn/init.h"
#include "opsnn/nn/layers.h"
#include "opsnn/nn/module.h"
#include "opsnn/nn/sequential.h"
#include "opsnn/nn/sync_batch_norm.h"
