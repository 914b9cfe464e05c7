<?php

declare(strict_types=1);

namespace TransferSidecar\Exception;

/**
 * The daemon could not take the job (unreachable, 429, 5xx, an unexpected answer) and the job
 * could not be written to the spool directory either.
 * getPrevious() is the reason the daemon could not take it.
 */
final class SpoolException extends \RuntimeException implements SidecarException
{
}
