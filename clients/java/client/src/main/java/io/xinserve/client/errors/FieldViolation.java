package io.xinserve.client.errors;

/**
 * One invalid field of a request, from {@code google.rpc.BadRequest.FieldViolation}.
 *
 * @param field the path of the field in the request, e.g. {@code "sampling_params.top_p"}
 * @param description why the value was refused
 * @param reason a machine-readable reason code, empty if the server sent none
 */
public record FieldViolation(String field, String description, String reason) {}
