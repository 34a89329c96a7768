package io.xinserve.client.errors;

import java.util.List;
import java.util.Optional;

/**
 * The request was refused as invalid. {@link #fieldViolations()} names every offending field at
 * once (from {@code google.rpc.BadRequest}), e.g. {@code sampling_params.top_p}.
 *
 * <p>gRPC status {@code INVALID_ARGUMENT} (also used for {@code OUT_OF_RANGE}).
 */
public class InvalidArgumentException extends XinserveException {
  private static final long serialVersionUID = 1L;

  private final transient List<FieldViolation> fieldViolations;

  /**
   * Creates the exception; normally done by {@link XinserveExceptions#from}.
   *
   * @param details the decoded status, with its field violations
   * @param cause the underlying gRPC exception, may be {@code null}
   */
  public InvalidArgumentException(ErrorDetails details, Throwable cause) {
    super(details, cause);
    this.fieldViolations = details.fieldViolations();
  }

  /** @return every field violation the server reported; empty if it sent no BadRequest detail */
  public List<FieldViolation> fieldViolations() {
    return fieldViolations == null ? List.of() : fieldViolations;
  }

  /**
   * Finds the violation of one field.
   *
   * @param field the field path, e.g. {@code "sampling_params.temperature"}
   * @return the violation of that field, if reported
   */
  public Optional<FieldViolation> fieldViolation(String field) {
    return fieldViolations().stream().filter(v -> v.field().equals(field)).findFirst();
  }
}
