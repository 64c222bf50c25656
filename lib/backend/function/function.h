/* The function backend: a sandbox is a keeper forked from a runtime's
 * zygote, and each call a jailed fork of it (see function.c). */
#ifndef CRL_FUNCTION_FUNCTION_H
#define CRL_FUNCTION_FUNCTION_H

#include "../../core/backend.h"

extern const struct crl_backend_ops crl_function_backend;

#endif
