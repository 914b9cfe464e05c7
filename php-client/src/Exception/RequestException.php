<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * The daemon refused the request with a 4xx: it is invalid as sent and retrying (or spooling) it
 * would not help. Carries the HTTP status and the daemon's stable error code, e.g.
 * 400 UNKNOWN_TARGET, 403 PATH_NOT_ALLOWED, 409 JOB_CONFLICT.
 */
class RequestException extends \RuntimeException implements SidecarException
{
    private int $status;
    private string $errorCode;
    private ?string $jobId;

    public function __construct(int $status, string $errorCode, string $message, ?string $jobId = null)
    {
        parent::__construct(sprintf('HTTP %d %s: %s', $status, $errorCode, $message), $status);
        $this->status = $status;
        $this->errorCode = $errorCode;
        $this->jobId = $jobId;
    }

    public function getStatus(): int
    {
        return $this->status;
    }

    /** The daemon's error code (`error.code`), e.g. UNKNOWN_TARGET; `HTTP_<status>` if the body had none. */
    public function getErrorCode(): string
    {
        return $this->errorCode;
    }

    /** The id of the job the request was about, when there was one. */
    public function getJobId(): ?string
    {
        return $this->jobId;
    }
}
