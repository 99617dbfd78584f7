// Everything of opsnn::nn in one include: Module, the layers, Sequential and the initialisers.
#pragma once

#include "opsnn/nn/init.h"
#include "opsnn/nn/layers.h"
#include "opsnn/nn/module.h"
#include "opsnn/nn/sequential.h"
